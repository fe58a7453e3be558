package gateway

import "errors"

// Sentinel errors.
var (
	// ErrInvalidConfig means Config.Validate refused the configuration; the wrapped message
	// names the field.
	ErrInvalidConfig = errors.New("gateway: invalid config")

	// ErrClosed means the Gateway was closed. Its handler then answers 503.
	ErrClosed = errors.New("gateway: closed")
)
