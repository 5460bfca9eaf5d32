package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"
)

// fakeAz answers `az account get-access-token -o json --resource R [--tenant T]` as the Azure
// CLI does, which is where the suite's Entra ID credential (azidentity's
// DefaultAzureCredential, narrowed to AzureCLICredential by AZURE_TOKEN_CREDENTIALS) gets its
// tokens. Tidebus has no Entra ID, so the "access token" is a shared access signature for the
// namespace root signed with the policy in TIDEBUS_GO_KEY_NAME / TIDEBUS_GO_KEY: the SDK puts
// it on $cbs as a jwt (Tidebus reads the token's text, as it does for the Python SDK) and the
// administration client sends it as its Authorization header, as Service Bus takes either.
func fakeAz(args []string) error {
	if len(args) < 2 || args[0] != "account" || args[1] != "get-access-token" {
		return fmt.Errorf("tidebus's stand-in for the Azure CLI answers only `az account get-access-token`, not %q", args)
	}
	namespace, keyName, key := os.Getenv("TIDEBUS_GO_NAMESPACE"), os.Getenv("TIDEBUS_GO_KEY_NAME"), os.Getenv("TIDEBUS_GO_KEY")
	if namespace == "" || keyName == "" || key == "" {
		return fmt.Errorf("TIDEBUS_GO_NAMESPACE, TIDEBUS_GO_KEY_NAME and TIDEBUS_GO_KEY must be set")
	}
	expiry := time.Now().Add(time.Hour).Unix()
	resource := url.QueryEscape("sb://" + namespace + "/")
	se := strconv.FormatInt(expiry, 10)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(resource + "\n" + se))
	sig := url.QueryEscape(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	token := fmt.Sprintf("SharedAccessSignature sr=%s&sig=%s&se=%s&skn=%s", resource, sig, se, url.QueryEscape(keyName))
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"accessToken": token,
		"expires_on":  expiry,
		"expiresOn":   time.Unix(expiry, 0).Local().Format("2006-01-02 15:04:05.000000"),
		"tokenType":   "Bearer",
	})
}
