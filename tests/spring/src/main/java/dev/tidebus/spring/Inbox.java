package dev.tidebus.spring;

import com.azure.spring.cloud.service.servicebus.consumer.ServiceBusErrorHandler;
import com.azure.spring.cloud.service.servicebus.consumer.ServiceBusRecordMessageListener;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/**
 * The listener and error handler from which the starter builds its processor client: each
 * order received is kept (the processor completes it), each error logged and kept.
 */
@Configuration
public class Inbox {
    private static final Logger LOG = LoggerFactory.getLogger(Inbox.class);

    private final BlockingQueue<String> received = new LinkedBlockingQueue<>();
    private final BlockingQueue<Throwable> errors = new LinkedBlockingQueue<>();

    public BlockingQueue<String> received() {
        return received;
    }

    public BlockingQueue<Throwable> errors() {
        return errors;
    }

    @Bean
    ServiceBusRecordMessageListener orderListener() {
        return context -> received.add(context.getMessage().getBody().toString());
    }

    @Bean
    ServiceBusErrorHandler orderErrors() {
        return context -> {
            LOG.error("processor error from {}", context.getErrorSource(), context.getException());
            errors.add(context.getException());
        };
    }
}
