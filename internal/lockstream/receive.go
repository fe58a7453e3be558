package lockstream

import "context"

// Received is what one Receive of a bidirectional stream returned.
type Received[T any] struct {
	Msg *T
	Err error
}

// ReceiveAll calls receive on a goroutine of its own (it blocks) and hands
// each message to the returned channel, until receive fails (that error is
// handed on too) or ctx ends. The goroutine ends when the stream does.
func ReceiveAll[T any](ctx context.Context, receive func() (*T, error)) <-chan Received[T] {
	in := make(chan Received[T])
	go func() {
		for {
			m, err := receive()
			select {
			case in <- Received[T]{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return in
}
