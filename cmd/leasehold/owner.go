package main

import (
	"fmt"
	"os"
	"os/user"
)

// ownerOr is owner, or defaultOwner() when it is empty.
func ownerOr(owner string) string {
	if owner != "" {
		return owner
	}
	return defaultOwner()
}

// defaultOwner is the owner label of a session the CLI creates without
// --owner: user@host:pid, so that status, watch and the dashboard say who
// took a lock.
func defaultOwner() string {
	host, _ := os.Hostname()
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return fmt.Sprintf("%s@%s:%d", name, host, os.Getpid())
}
