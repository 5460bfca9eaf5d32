// Package recipe runs the README's Go recipe for test suites for real ("Testing with
// Tidebus"): resetBroker and advanceBroker, plain net/http POSTs to the broker's
// administration endpoint, around azservicebus (pinned in ../go.mod). A package of its own so
// that its test binary links the SDK only, not Testcontainers.
//
// Environment: TIDEBUS_CONNECTION_STRING (the broker's AMQP address) and TIDEBUS_ADMIN (its
// administration endpoint, http://127.0.0.1:PORT), for a broker with [testing] reset = true
// and clock = "controlled" that lets anonymous clients in, declaring the queue "recipe". Run
// by tests/broker/go_recipe.rs from `cargo test`, which starts such a broker.
package recipe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// The recipe, as the README has it but for where admin comes from.

var admin = os.Getenv("TIDEBUS_ADMIN") // "http://127.0.0.1:5300"

func resetBroker(t *testing.T) {
	t.Helper()
	testingCall(t, "reset", "")
}

func advanceBroker(t *testing.T, d time.Duration) {
	t.Helper()
	testingCall(t, "clock/advance", fmt.Sprintf(`{"by": "%dms"}`, d.Milliseconds()))
}

func testingCall(t *testing.T, call, body string) {
	t.Helper()
	answer, err := http.Post(admin+"/$testing/"+call, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer answer.Body.Close()
	if answer.StatusCode != http.StatusOK {
		text, _ := io.ReadAll(answer.Body)
		t.Fatalf("%s: %s %s", call, answer.Status, text)
	}
}

// The recipe ends here.

// queue is the queue the broker declares for these tests.
const queue = "recipe"

// deadline bounds each test; a receive that should find a message at once waits at most wait.
const (
	deadline = time.Minute
	wait     = 30 * time.Second
)

func client(t *testing.T) *azservicebus.Client {
	t.Helper()
	connection := os.Getenv("TIDEBUS_CONNECTION_STRING")
	if connection == "" || admin == "" {
		t.Fatal("TIDEBUS_CONNECTION_STRING and TIDEBUS_ADMIN are not set: run this through `cargo test` (tests/broker/go_recipe.rs)")
	}
	c, err := azservicebus.NewClientFromConnectionString(connection, nil)
	if err != nil {
		t.Fatalf("NewClientFromConnectionString: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// brokerNow reads the broker's clock: GET /$testing/clock answers {"now":…,"nowMs":N,"aheadMs":N}.
func brokerNow(t *testing.T) time.Time {
	t.Helper()
	answer, err := http.Get(admin + "/$testing/clock")
	if err != nil {
		t.Fatal(err)
	}
	defer answer.Body.Close()
	text, _ := io.ReadAll(answer.Body)
	var clock struct {
		NowMs int64 `json:"nowMs"`
	}
	if answer.StatusCode != http.StatusOK || json.Unmarshal(text, &clock) != nil || clock.NowMs == 0 {
		t.Fatalf("GET /$testing/clock: %s %s", answer.Status, text)
	}
	return time.UnixMilli(clock.NowMs)
}

func receiveOne(ctx context.Context, t *testing.T, receiver *azservicebus.Receiver) *azservicebus.ReceivedMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	got, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("ReceiveMessages: %d messages within %v (%v)", len(got), wait, err)
	}
	return got[0]
}

// start resets the broker and opens a client and a sender to the queue, within the test's
// deadline.
func start(t *testing.T) (context.Context, *azservicebus.Client, *azservicebus.Sender) {
	t.Helper()
	resetBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	c := client(t)
	sender, err := c.NewSender(queue, nil)
	if err != nil {
		t.Fatalf("NewSender: %v", err)
	}
	return ctx, c, sender
}

func TestRecipeResetTakesEveryMessageAway(t *testing.T) {
	ctx, c, sender := start(t)
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("before the reset")}, nil); err != nil {
		t.Fatalf("SendMessage: %v", err)
	}

	resetBroker(t)

	receiver, err := c.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatalf("NewReceiverForQueue: %v", err)
	}
	from := int64(0)
	left, err := receiver.PeekMessages(ctx, 1, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
	if err != nil || len(left) != 0 {
		t.Fatalf("after the reset the queue holds %d messages (%v)", len(left), err)
	}
	// The sender stays attached across the reset and reaches the queue created again.
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("after the reset")}, nil); err != nil {
		t.Fatalf("SendMessage after the reset: %v", err)
	}
	got := receiveOne(ctx, t, receiver)
	if string(got.Body) != "after the reset" || got.SequenceNumber == nil || *got.SequenceNumber != 1 {
		t.Fatalf("received %q with sequence number %v, want the message sent after the reset, number 1", got.Body, got.SequenceNumber)
	}
	if err := receiver.CompleteMessage(ctx, got, nil); err != nil {
		t.Fatalf("CompleteMessage: %v", err)
	}
}

func TestRecipeScheduleADayAheadArrivesAfterTheAdvance(t *testing.T) {
	ctx, c, sender := start(t)
	tomorrow := brokerNow(t).Add(24 * time.Hour)
	numbers, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("tomorrow")}}, tomorrow, nil)
	if err != nil || len(numbers) != 1 {
		t.Fatalf("ScheduleMessages: %v %v", numbers, err)
	}
	receiver, err := c.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatalf("NewReceiverForQueue: %v", err)
	}
	peeked, err := receiver.PeekMessages(ctx, 1, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &numbers[0]})
	if err != nil || len(peeked) != 1 || peeked[0].State != azservicebus.MessageStateScheduled {
		t.Fatalf("the message is not scheduled before the advance: %v %v", peeked, err)
	}

	advanced := time.Now()
	advanceBroker(t, 24*time.Hour)

	got := receiveOne(ctx, t, receiver)
	if string(got.Body) != "tomorrow" {
		t.Fatalf("received %q, want the scheduled message", got.Body)
	}
	if got.EnqueuedTime == nil || got.EnqueuedTime.Before(tomorrow) {
		t.Errorf("enqueued at %v, before its time %v", got.EnqueuedTime, tomorrow)
	}
	t.Logf("arrived %v after the advance", time.Since(advanced))
	if err := receiver.CompleteMessage(ctx, got, nil); err != nil {
		t.Fatalf("CompleteMessage: %v", err)
	}
}
