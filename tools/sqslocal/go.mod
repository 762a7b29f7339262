module github.com/exactlyonce/exactlyonce/tools/sqslocal

go 1.24

require (
	github.com/Admiral-Piett/goaws v0.5.4
	github.com/sirupsen/logrus v1.9.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/gorilla/mux v1.8.0 // indirect
	github.com/gorilla/schema v1.4.1 // indirect
	github.com/mitchellh/copystructure v1.2.0 // indirect
	github.com/mitchellh/reflectwalk v1.0.2 // indirect
	golang.org/x/sys v0.13.0 // indirect
)
