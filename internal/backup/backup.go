// Package backup is the file format of `leasehold snapshot save`, `status`
// and `restore`: a snapshot stream of the state machine with what the
// leader said about it and a checksum, written so that a file is either a
// whole backup or absent.
//
// A backup file:
//
//	"LHBACKUP1\n"
//	the snapshot stream (internal/fsm/snapshot.go), self-delimiting
//	SnapshotInfo (protobuf: index, term, token, grant clock, node, time)
//	uint32 big-endian: the length of SnapshotInfo
//	SHA-256 of every byte before it (32 bytes)
package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Errors of Open and Read.
var (
	// ErrNotBackup: the file is not a leasehold backup (too short, another
	// magic, an impossible layout).
	ErrNotBackup = errors.New("backup: not a leasehold backup")
	// ErrDamaged: the checksum does not match: the file is damaged or
	// truncated.
	ErrDamaged = errors.New("backup: checksum mismatch: the file is damaged or truncated")
)

var magic = []byte("LHBACKUP1\n")

const trailerLen = 4 + sha256.Size

// maxInfoLen bounds the SnapshotInfo a reader accepts.
const maxInfoLen = 1 << 20

// File is an opened backup whose layout and checksum were verified.
type File struct {
	f      *os.File
	Size   int64             // bytes in the file
	Info   *pb.SnapshotInfo  // what the leader said about the snapshot
	Stream *io.SectionReader // the snapshot stream
	Sum    []byte            // the SHA-256 of the file before its checksum
}

// Open opens path and verifies it (Read).
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	b, err := Read(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return b, nil
}

// Close closes the file.
func (b *File) Close() error { return b.f.Close() }

// Read verifies f's layout and checksum and returns the backup it holds;
// the File reads from f, which the caller closes (File.Close).
func Read(f *os.File) (*File, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < int64(len(magic))+trailerLen {
		return nil, fmt.Errorf("%w (too short)", ErrNotBackup)
	}
	head := make([]byte, len(magic))
	if _, err := f.ReadAt(head, 0); err != nil || !bytes.Equal(head, magic) {
		return nil, fmt.Errorf("%w (bad magic)", ErrNotBackup)
	}
	trailer := make([]byte, trailerLen)
	if _, err := f.ReadAt(trailer, size-trailerLen); err != nil {
		return nil, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size-sha256.Size)); err != nil {
		return nil, err
	}
	sum := h.Sum(nil)
	if !bytes.Equal(sum, trailer[4:]) {
		return nil, fmt.Errorf("%w (sha256 %x, recorded %x)", ErrDamaged, sum, trailer[4:])
	}
	infoLen := int64(binary.BigEndian.Uint32(trailer[:4]))
	streamEnd := size - trailerLen - infoLen
	if infoLen > maxInfoLen || streamEnd < int64(len(magic)) {
		return nil, fmt.Errorf("%w (bad info length %d)", ErrNotBackup, infoLen)
	}
	raw := make([]byte, infoLen)
	if _, err := f.ReadAt(raw, streamEnd); err != nil {
		return nil, err
	}
	info := &pb.SnapshotInfo{}
	if err := proto.Unmarshal(raw, info); err != nil {
		return nil, fmt.Errorf("%w (decode info: %w)", ErrNotBackup, err)
	}
	off := int64(len(magic))
	return &File{f: f, Size: size, Info: info, Stream: io.NewSectionReader(f, off, streamEnd-off), Sum: sum}, nil
}

// Save writes a backup to path: stream writes the snapshot stream and
// returns its SnapshotInfo. The file is written as path.part-*, synced,
// and renamed to path only when complete, so path is either absent or a
// whole backup. It returns the info and the file's size.
func Save(path string, stream func(io.Writer) (*pb.SnapshotInfo, error)) (*pb.SnapshotInfo, int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".part-*")
	if err != nil {
		return nil, 0, err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	defer tmp.Close()
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(tmp, h), 256<<10)
	bw.Write(magic)
	info, err := stream(bw)
	if err != nil {
		return nil, 0, err
	}
	raw, err := proto.Marshal(info)
	if err != nil {
		return nil, 0, err
	}
	bw.Write(raw)
	bw.Write(binary.BigEndian.AppendUint32(nil, uint32(len(raw))))
	if err := bw.Flush(); err != nil {
		return nil, 0, err
	}
	if _, err := tmp.Write(h.Sum(nil)); err != nil {
		return nil, 0, err
	}
	if err := tmp.Sync(); err != nil {
		return nil, 0, err
	}
	st, err := tmp.Stat()
	if err != nil {
		return nil, 0, err
	}
	if err := tmp.Close(); err != nil {
		return nil, 0, err
	}
	return info, st.Size(), os.Rename(tmp.Name(), path)
}

// Stats counts the records of a backup's snapshot stream.
type Stats struct {
	Sessions   int   `json:"sessions"`
	Locks      int   `json:"locks"`
	KVKeys     int   `json:"kv_keys"`
	Tombstones int   `json:"kv_tombstones"`
	ValueBytes int64 `json:"kv_value_bytes"`
	Nodes      int   `json:"nodes"`
	StateBytes int64 `json:"state_bytes"` // the state's size as the quota counts it
}

// Scan reads the whole snapshot stream: it counts its records and builds
// the state (without a quota), so a stream that would not restore fails
// here.
func (b *File) Scan() (Stats, error) {
	var s Stats
	err := fsm.ScanStream(io.NewSectionReader(b.Stream, 0, b.Stream.Size()), func(r *fsmpb.SnapshotRecord) error {
		switch x := r.GetRec().(type) {
		case *fsmpb.SnapshotRecord_Session:
			s.Sessions++
		case *fsmpb.SnapshotRecord_Lock:
			s.Locks++
		case *fsmpb.SnapshotRecord_Kv:
			if x.Kv.GetDeleted() {
				s.Tombstones++
			} else {
				s.KVKeys++
				s.ValueBytes += int64(len(x.Kv.GetValue()))
			}
		case *fsmpb.SnapshotRecord_Node:
			s.Nodes++
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	limits := fsm.DefaultLimits()
	limits.MaxStateBytes = 0
	m, err := fsm.ReadSnapshot(limits, io.NewSectionReader(b.Stream, 0, b.Stream.Size()))
	if err != nil {
		return s, err
	}
	s.StateBytes = m.Bytes()
	return s, nil
}
