package config

// WrapRequestBodies exposes SQSHTTPClient's body wrapping to the tests, around any HTTPDoer.
func WrapRequestBodies(next HTTPDoer) HTTPDoer { return bodyWrapping{next} }
