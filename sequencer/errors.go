package sequencer

import "errors"

// Sentinel errors. Every error of this package for one of these conditions wraps the sentinel;
// match them with errors.Is.
var (
	// ErrMalformed means the bytes or text are not a canonical version-2 sequencer (bad
	// base64url, unknown version, a field out of range, trailing bytes).
	ErrMalformed = errors.New("sequencer: malformed")

	// ErrVersion means the sequencer is of version 1, which carries neither mode nor slot and
	// is refused: the holder must acquire again from a cluster that signs version 2.
	ErrVersion = errors.New("sequencer: old version")

	// ErrBadSignature means the signature does not match the content: the sequencer was
	// forged or altered.
	ErrBadSignature = errors.New("sequencer: bad signature")

	// ErrUnknownKey means the sequencer names a key id that the verifier does not trust.
	ErrUnknownKey = errors.New("sequencer: unknown key")

	// ErrKeyRetired means the sequencer was issued after its key's not-after time.
	ErrKeyRetired = errors.New("sequencer: key retired")

	// ErrWrongCluster means the sequencer was issued by another cluster than the verifier's.
	ErrWrongCluster = errors.New("sequencer: wrong cluster")

	// ErrWrongLock means the sequencer was granted for another lock than the one the caller
	// expects for the resource.
	ErrWrongLock = errors.New("sequencer: wrong lock")

	// ErrWrongMode means the sequencer's grant holds its lock shared (a reader) where the
	// resource requires the exclusive holder (a writer).
	ErrWrongMode = errors.New("sequencer: wrong mode")

	// ErrWrongSlot means the sequencer's grant holds another slot of a semaphore than the one
	// whose key (NAME/slot/K) it presents.
	ErrWrongSlot = errors.New("sequencer: wrong slot")

	// ErrInvalidKeySet means a key set (file, JSON, or keys given to NewSigner) is not
	// usable; the message names the reason.
	ErrInvalidKeySet = errors.New("sequencer: invalid key set")
)
