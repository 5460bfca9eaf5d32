package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;

import jakarta.jms.Connection;
import jakarta.jms.JMSSecurityException;
import jakarta.jms.Session;
import org.junit.jupiter.api.Test;

/**
 * How a Qpid JMS client signs in: SASL ANONYMOUS to a broker that lets anonymous clients in
 * (a plain amqp:// URI without credentials), or SASL PLAIN with a shared access policy's name
 * and key (what azure-servicebus-jms does with a connection string).
 */
class ConnectionTest extends JmsTest {
    @Test
    void aConnectionWithoutCredentialsSignsInAnonymouslyAndSends() throws Exception {
        Connection connection = closing(factory("&amqp.saslMechanisms=ANONYMOUS").createConnection());
        connection.start();
        assertEquals("QpidJMS", connection.getMetaData().getJMSProviderName());
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        session.createProducer(session.createQueue("connection-anonymous")).send(session.createTextMessage("anon"));
        assertEquals("anon", receiveText(consumer(session, "connection-anonymous")));
    }

    @Test
    void aConnectionSignedInWithTheEmulatorPolicySendsAndReceives() throws Exception {
        Connection connection = closing(factory("&amqp.saslMechanisms=PLAIN").createConnection(POLICY, KEY));
        connection.start();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        session.createProducer(session.createQueue("connection-plain")).send(session.createTextMessage("signed"));
        assertEquals("signed", receiveText(consumer(session, "connection-plain")));
    }

    @Test
    void aWrongKeyIsRefusedWithASecurityException() {
        thrown(JMSSecurityException.class,
            () -> closing(factory("&amqp.saslMechanisms=PLAIN").createConnection(POLICY, "not-the-key")).start());
    }
}
