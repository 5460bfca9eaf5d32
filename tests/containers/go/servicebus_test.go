// Package containers runs the README's Testcontainers for Go recipe for real: the
// testcontainers-go Azure Service Bus module (modules/azure/servicebus, pinned in go.mod)
// starts the Tidebus image through a Docker-compatible API (podman's socket in our suite,
// named by DOCKER_HOST), and the azservicebus SDK sends and receives with the connection
// string the module hands out.
//
// Environment: TIDEBUS_IMAGE, the image to test (required); DOCKER_HOST as Testcontainers
// reads it. Run by tests/broker/containers.rs from `cargo test`.
package containers

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/azure/servicebus"
	"github.com/testcontainers/testcontainers-go/wait"
)

// readyLine is what the image logs once it serves, as Microsoft's emulator image does.
const readyLine = "Emulator Service is Successfully Up!"

// deadline bounds the whole test: two containers started, a send and a receive.
const deadline = 2 * time.Minute

// config is an emulator Config.json, as users hand it to the module (WithConfig copies it to
// /ServiceBus_Emulator/ConfigFiles/Config.json before the container starts).
const config = `{
  "UserConfig": {
    "Namespaces": [{
      "Name": "sbemulatorns",
      "Queues": [{"Name": "tc.go.queue", "Properties": {"MaxDeliveryCount": 3}}],
      "Topics": []
    }],
    "Logging": {"Type": "File"}
  }
}`

// queue is the one queue of config.
const queue = "tc.go.queue"

func image(t *testing.T) string {
	t.Helper()
	img := os.Getenv("TIDEBUS_IMAGE")
	if img == "" {
		t.Fatal("TIDEBUS_IMAGE is not set: run this through `cargo test` (tests/broker/containers.rs)")
	}
	return img
}

// The module always starts a SQL Server container first (mcr.microsoft.com/mssql/server,
// which Tidebus does not use) and offers no option to leave it out; WithMSSQL names its image.
// A second Tidebus container stands in for it, waited for by its ready line instead of SQL
// Server's "Recovery is complete.": the emulator's SQL_SERVER and MSSQL_SA_PASSWORD, which
// the module then sets, are accepted and ignored by the image.
func TestServiceBusModuleRunsTheImageAndTheSDKSendsAndReceives(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	img := image(t)

	ctr, err := servicebus.Run(ctx, img,
		servicebus.WithAcceptEULA(),
		servicebus.WithConfig(strings.NewReader(config)),
		servicebus.WithMSSQL(img, testcontainers.WithWaitStrategy(wait.ForLog(readyLine))),
	)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("servicebus.Run: %v", err)
	}
	logs := containerLogs(ctx, t, ctr)
	if !strings.Contains(logs, readyLine) {
		t.Fatalf("the module's wait (ports 5672 and 5300, /health) passed before the ready line:\n%s", logs)
	}
	if !strings.Contains(logs, "SQL_SERVER") {
		t.Errorf("the module's SQL Server settings were not seen and ignored:\n%s", logs)
	}

	connection, err := ctr.ConnectionString(ctx)
	if err != nil {
		t.Fatalf("ConnectionString: %v", err)
	}
	t.Logf("connection string: %s", connection)
	client, err := azservicebus.NewClientFromConnectionString(connection, nil)
	if err != nil {
		t.Fatalf("NewClientFromConnectionString: %v", err)
	}
	defer func() { _ = client.Close(ctx) }()

	sender, err := client.NewSender(queue, nil)
	if err != nil {
		t.Fatalf("NewSender: %v", err)
	}
	body := "through testcontainers-go's servicebus module"
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	receiver, err := client.NewReceiverForQueue(queue, nil)
	if err != nil {
		t.Fatalf("NewReceiverForQueue: %v", err)
	}
	got, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatalf("ReceiveMessages: %v", err)
	}
	if len(got) != 1 || string(got[0].Body) != body {
		t.Fatalf("received %d messages, want the one sent: %+v", len(got), got)
	}
	if err := receiver.CompleteMessage(ctx, got[0], nil); err != nil {
		t.Fatalf("CompleteMessage: %v", err)
	}
}

func containerLogs(ctx context.Context, t *testing.T, ctr *servicebus.Container) string {
	t.Helper()
	reader, err := ctr.Logs(ctx)
	if err != nil {
		t.Fatalf("logs: %v", err)
	}
	defer func() { _ = reader.Close() }()
	var text strings.Builder
	buf := make([]byte, 64*1024)
	for {
		n, err := reader.Read(buf)
		text.Write(buf[:n])
		if err != nil {
			return text.String()
		}
	}
}
