package exactlyonce

import _ "embed" // the API's document, served by GET /openapi.yaml

// OpenAPI is the API's OpenAPI 3.1 document (openapi.yaml): every route, parameter, body, answer
// and error. The API serves it at GET /openapi.yaml, and every test's traffic is validated against
// it (internal/openapitest).
//
//go:embed openapi.yaml
var OpenAPI []byte
