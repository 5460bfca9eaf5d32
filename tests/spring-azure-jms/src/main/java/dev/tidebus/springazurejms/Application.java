package dev.tidebus.springazurejms;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;

/**
 * A Spring Boot application on Spring Cloud Azure's JMS starter: orders sent with JmsTemplate
 * to a queue and received by a {@code @JmsListener} ({@link Orders}), and events published on a
 * topic and received by a {@code @JmsListener} on a shared durable subscription
 * ({@link Events}). It declares no JMS bean: the starter builds the ConnectionFactory
 * (azure-servicebus-jms, for the premium tier) from application.properties, and the listener
 * container factories {@code jmsListenerContainerFactory} (queues) and
 * {@code topicJmsListenerContainerFactory} (topics); Spring Boot adds the JmsTemplate.
 */
@SpringBootApplication
public class Application {
    public static void main(String[] args) {
        SpringApplication.run(Application.class, args);
    }
}
