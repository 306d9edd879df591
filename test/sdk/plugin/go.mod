module example.com/serial

go 1.26.0

require github.com/cdi-exec/plugins v0.0.0

require (
	go.etcd.io/bbolt v1.5.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	tags.cncf.io/container-device-interface v1.1.1 // indirect
	tags.cncf.io/container-device-interface/specs-go v1.1.1 // indirect
)

// The SDK is this checkout's: test/sdk builds this module against it.
replace github.com/cdi-exec/plugins => ../../..
