package dev.tidebus.springjms;

import org.springframework.jms.annotation.JmsListener;
import org.springframework.stereotype.Component;

/**
 * Answers each request on the queue {@code requests}: Spring sends the return value to the
 * request's JMSReplyTo, with the request's JMSMessageID as its JMSCorrelationID.
 */
@Component
public class Requests {
    public static final String QUEUE = "requests";

    @JmsListener(destination = QUEUE)
    String onRequest(String request) {
        return "reply to " + request;
    }
}
