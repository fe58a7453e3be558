// Package leaseholdv1connect holds the generated connect-go clients and
// handlers of the leasehold API (gRPC, gRPC-Web and Connect on one port).
package leaseholdv1connect
