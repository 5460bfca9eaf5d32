package dev.tidebus.springjms;

import jakarta.jms.ConnectionFactory;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.annotation.Bean;
import org.springframework.jms.config.DefaultJmsListenerContainerFactory;

/**
 * A Spring Boot application on Spring JMS: orders sent with JmsTemplate and received by a
 * {@code @JmsListener}, and requests answered by a listener whose return value Spring sends to
 * each request's JMSReplyTo, and events published on a topic received by a listener on a
 * shared durable subscription. Spring Boot auto-configures the JmsTemplate and the listener
 * containers around the one bean an AMQP 1.0 broker needs: Qpid JMS's ConnectionFactory.
 */
@SpringBootApplication
public class Application {
    public static void main(String[] args) {
        SpringApplication.run(Application.class, args);
    }

    /** Qpid JMS on the broker's plain AMQP URI (application.properties: tidebus.jms.url). */
    @Bean
    ConnectionFactory connectionFactory(@Value("${tidebus.jms.url}") String url) {
        return new JmsConnectionFactory(url);
    }

    /** Listener containers on topics, each a shared durable subscription ({@link Events}). */
    @Bean
    DefaultJmsListenerContainerFactory topicListenerFactory(ConnectionFactory connectionFactory) {
        DefaultJmsListenerContainerFactory factory = new DefaultJmsListenerContainerFactory();
        factory.setConnectionFactory(connectionFactory);
        factory.setPubSubDomain(true);
        factory.setSubscriptionDurable(true);
        factory.setSubscriptionShared(true);
        return factory;
    }
}
