// A module outside Airlock's own: it builds against Airlock's public
// packages alone (Go refuses another module's internal packages), which
// internal/layering's TestExamplesBuildOutsideTheModule checks.
module example.com/airlock-examples

go 1.26.8

require (
	github.com/airlock-dev/airlock v0.0.0
	github.com/nats-io/nats.go v1.55.0
	github.com/nats-io/nkeys v0.4.16
)

require (
	github.com/cloudevents/sdk-go/v2 v2.16.2 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/airlock-dev/airlock => ../
