package dev.tidebus.sdk;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.azure.messaging.servicebus.ServiceBusReceivedMessage;
import com.azure.messaging.servicebus.ServiceBusReceiverClient;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import com.azure.messaging.servicebus.models.ServiceBusMessageState;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.Base64;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The README's Java recipe ("Testing with Tidebus"), run for real: a reset before each test and
 * an {@code advance(Duration)} of the broker's controlled clock, both plain
 * {@code java.net.http.HttpClient} POSTs to the administration endpoint (run.sh starts the broker
 * with {@code --testing reset,clock,exposed}).
 *
 * <p>Last of the suite ({@code @Order}, with the class orderer of junit-platform.properties): a
 * reset empties every class's queues, and the clock, once moved forward, never goes back, so
 * the classes that schedule or lock by the wall clock must have run before.
 */
@Order(Integer.MAX_VALUE)
class TestingRecipeTest extends TidebusTest {
    // The recipe, as the README has it but for ADMIN and the Authorization header: run.sh's
    // broker serves its administration endpoint over HTTPS and refuses anonymous clients.
    static final HttpClient HTTP = HttpClient.newHttpClient();
    static final String ADMIN = "https://127.0.0.1:" + required("TIDEBUS_ADMIN_PORT");

    static void testing(String call, String json) throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create(ADMIN + "/$testing/" + call))
            .header("Authorization", signature())
            .POST(HttpRequest.BodyPublishers.ofString(json)).build();
        HttpResponse<String> answer = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
        if (answer.statusCode() != 200) throw new IllegalStateException(call + ": " + answer.statusCode() + " " + answer.body());
    }

    @BeforeEach
    void reset() throws Exception { testing("reset", ""); }

    static void advance(Duration by) throws Exception { testing("clock/advance", "{\"by\": \"" + by + "\"}"); }
    // The recipe ends here.

    /** The broker's clock, from {@code GET /$testing/clock} ({@code {"now":…,"nowMs":N,…}}). */
    static OffsetDateTime brokerNow() throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create(ADMIN + "/$testing/clock"))
            .header("Authorization", signature())
            .GET()
            .build();
        HttpResponse<String> answer = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
        assertEquals(200, answer.statusCode(), () -> "GET /$testing/clock: " + answer.body());
        Matcher nowMs = Pattern.compile("\"nowMs\":(\\d+)").matcher(answer.body());
        assertTrue(nowMs.find(), () -> "no nowMs in " + answer.body());
        return Instant.ofEpochMilli(Long.parseLong(nowMs.group(1))).atOffset(ZoneOffset.UTC);
    }

    /**
     * A shared access signature for the namespace, signed with the emulator's
     * RootManageSharedAccessKey (Manage), valid for an hour: what the SDKs make of a connection
     * string.
     */
    static String signature() throws Exception {
        String resource = URLEncoder.encode("sb://localhost/", UTF_8);
        long expiry = Instant.now().plus(Duration.ofHours(1)).getEpochSecond();
        Mac mac = Mac.getInstance("HmacSHA256");
        mac.init(new SecretKeySpec("SAS_KEY_VALUE".getBytes(UTF_8), "HmacSHA256"));
        String signed = Base64.getEncoder().encodeToString(mac.doFinal((resource + "\n" + expiry).getBytes(UTF_8)));
        return "SharedAccessSignature sr=" + resource + "&sig=" + URLEncoder.encode(signed, UTF_8) + "&se=" + expiry
            + "&skn=RootManageSharedAccessKey";
    }

    @Test
    @Tag("smoke")
    void aResetTakesEveryMessageAwayAndTheSenderKeepsWorking() throws Exception {
        ServiceBusSenderClient sender = sender("recipe");
        sender.sendMessage(text("before the reset"));
        ServiceBusReceiverClient receiver = receiver("recipe");
        assertEquals("before the reset", body(firstMessage(receiver)));

        reset();

        assertNull(firstMessage(receiver), "the queue is empty after the reset");
        // A sender stays attached across the reset and reaches the queue created again.
        sender.sendMessage(text("after the reset"));
        ServiceBusReceivedMessage got = receiveOne(receiver("recipe"));
        assertEquals("after the reset", body(got));
        assertEquals(1, got.getSequenceNumber(), "sequence numbers start again from 1");
    }

    @Test
    @Tag("smoke")
    void aMessageScheduledADayAheadArrivesRightAfterTheClockAdvancesADay() throws Exception {
        OffsetDateTime tomorrow = brokerNow().plusHours(24);
        long scheduled = sender("recipe").scheduleMessage(text("tomorrow"), tomorrow);
        ServiceBusReceiverClient receiver = receiver("recipe");
        assertEquals(ServiceBusMessageState.SCHEDULED, receiver.peekMessage(scheduled).getState());

        advance(Duration.ofHours(24));

        // Received within the suite's receive deadline: a day before the broker's clock moved.
        ServiceBusReceivedMessage got = receiveOne(receiver);
        assertEquals("tomorrow", body(got));
        assertTrue(!got.getEnqueuedTime().isBefore(tomorrow), "enqueued at " + got.getEnqueuedTime() + ", due " + tomorrow);
        receiver.complete(got);
    }
}
