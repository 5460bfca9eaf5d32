package dev.tidebus.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import javax.xml.parsers.DocumentBuilderFactory;
import org.w3c.dom.Element;
import org.w3c.dom.NodeList;

/**
 * The broker's view of a topic's subscriptions, from its administration endpoint (Service Bus's
 * ATOM management API, which run.sh turns on over HTTPS: TIDEBUS_ADMIN_URL; the JVM trusts its
 * certificate through run.sh's trust store). The topic consumer tests ask it whether the
 * Service Bus subscription a JMS consumer stands for exists, under the name Service Bus
 * Premium gives it: {@code <subscription>$<clientID>$D} (durable) or {@code $ND}
 * (non-durable), the client id empty without one.
 *
 * <p>run.sh's broker lets anonymous clients in, so requests carry no signature.
 */
final class AdminEndpoint {
    /** {@code https://localhost:PORT}. */
    static final String URL = JmsTest.required("TIDEBUS_ADMIN_URL");

    private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();

    private AdminEndpoint() {}

    /** {@code path} with each {@code $} percent-encoded, as the SDKs' administration clients send it. */
    private static String encoded(String path) {
        return path.replace("$", "%24");
    }

    private static HttpResponse<String> get(String path) throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create(URL + "/" + encoded(path) + "?api-version=2021-05"))
            .timeout(Duration.ofSeconds(20))
            .GET()
            .build();
        return HTTP.send(request, HttpResponse.BodyHandlers.ofString());
    }

    /** The names of {@code topic}'s subscriptions ({@code GET /<topic>/Subscriptions}), in the broker's order. */
    static List<String> subscriptions(String topic) throws Exception {
        HttpResponse<String> answer = get(topic + "/Subscriptions");
        assertEquals(200, answer.statusCode(), () -> "GET /" + topic + "/Subscriptions: " + answer.body());
        DocumentBuilderFactory factory = DocumentBuilderFactory.newInstance();
        factory.setNamespaceAware(true);
        NodeList entries = factory.newDocumentBuilder()
            .parse(new ByteArrayInputStream(answer.body().getBytes(StandardCharsets.UTF_8)))
            .getElementsByTagNameNS("http://www.w3.org/2005/Atom", "entry");
        List<String> names = new ArrayList<>();
        for (int i = 0; i < entries.getLength(); i++) {
            NodeList titles = ((Element) entries.item(i)).getElementsByTagNameNS("http://www.w3.org/2005/Atom", "title");
            names.add(titles.item(0).getTextContent());
        }
        return names;
    }

    /** The ATOM entry of the queue, topic or subscription at {@code path}, which must exist. */
    static String describe(String path) throws Exception {
        HttpResponse<String> answer = get(path);
        assertEquals(200, answer.statusCode(), () -> "GET /" + path + ": " + answer.body());
        return answer.body();
    }

    /** Whether {@code topic} has subscription {@code name} ({@code GET /<topic>/Subscriptions/<name>}: 200 or 404). */
    static boolean subscriptionExists(String topic, String name) throws Exception {
        HttpResponse<String> answer = get(topic + "/Subscriptions/" + name);
        assertTrue(answer.statusCode() == 200 || answer.statusCode() == 404,
            () -> "GET /" + topic + "/Subscriptions/" + name + ": " + answer.statusCode() + " " + answer.body());
        return answer.statusCode() == 200;
    }

    /** Asserts that {@code topic} has subscription {@code name}, listed and described. */
    static void assertSubscriptionExists(String topic, String name) throws Exception {
        List<String> names = subscriptions(topic);
        assertTrue(names.contains(name), () -> topic + " should have subscription " + name + "; it has " + names);
        assertTrue(subscriptionExists(topic, name), () -> "GET /" + topic + "/Subscriptions/" + name + " is 404");
    }

    /** Polls until {@code topic} has no subscription {@code name}, failing after {@link JmsTest#WAIT}. */
    static void assertEventuallyNoSubscription(String topic, String name) throws Exception {
        JmsTest.eventually(JmsTest.WAIT, () -> {
            try {
                return topic + " still has subscription " + name + " (it has " + subscriptions(topic) + ")";
            } catch (Exception e) {
                return topic + " still has subscription " + name + " (listing failed: " + e + ")";
            }
        }, () -> !subscriptionExists(topic, name) && !subscriptions(topic).contains(name));
    }

    /** Polls until {@code topic} has no subscription at all, failing after {@link JmsTest#WAIT}. */
    static void assertEventuallyNoSubscriptions(String topic) throws Exception {
        JmsTest.eventually(JmsTest.WAIT, () -> {
            try {
                return topic + " still has subscriptions " + subscriptions(topic);
            } catch (Exception e) {
                return topic + " still has subscriptions (listing failed: " + e + ")";
            }
        }, () -> subscriptions(topic).isEmpty());
    }
}
