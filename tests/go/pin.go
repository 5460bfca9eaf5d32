//go:build tools

// Package gosuite pins the Azure Service Bus Go SDK whose own tests run.sh runs: go.mod and
// go.sum name the exact module version and its hash, and `go mod download` fetches it from
// the Go module proxy into the module cache. The build tag keeps it out of every build.
package gosuite

import _ "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
