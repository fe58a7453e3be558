// Errors of the leasehold client: LeaseholdError carries the leasehold code
// (the server's ErrorDetail, or its Leasehold-Code header), and the local
// conditions of a session or lock have classes of their own.
import { Code as RpcCode, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema } from "./gen/leasehold/v1/leasehold_pb.js";

/** The leasehold error codes (docs/operating/limits-and-errors.md, "Error codes"). */
export const Code = {
  Internal: "internal",
  InvalidArgument: "invalid-argument",
  NotHolder: "not-holder",
  StaleToken: "stale-token",
  LeaseExpired: "lease-expired",
  LockDelay: "lock-delay",
  Locked: "locked",
  DeadlineExceeded: "deadline-exceeded",
  ResourceExhausted: "resource-exhausted",
  PermissionDenied: "permission-denied",
  NotLeader: "not-leader",
  Unavailable: "unavailable",
  OutcomeUnknown: "outcome-unknown",
  NotFound: "not-found",
  Compacted: "compacted",
  /** @deprecated the former name of Compacted. */
  ResyncRequired: "compacted",
  Canceled: "canceled",
} as const;

/** A leasehold error code. */
export type Code = (typeof Code)[keyof typeof Code];

/** The header (a trailer in gRPC) carrying the code of an error. */
export const codeHeader = "leasehold-code";

/**
 * LeaseholdError is every error a leasehold call fails with: `code` tells
 * what happened and what to do (docs/operating/limits-and-errors.md), `lastToken` is the last
 * accepted token of a stale-token refusal, `leaderAddr` the leader's API
 * address of a not-leader refusal when known.
 */
export class LeaseholdError extends Error {
  readonly code: Code;
  readonly lastToken?: bigint;
  readonly leaderAddr?: string;
  /** fromServer is true when a leasehold server answered with this error. */
  readonly fromServer: boolean;

  constructor(code: Code, message: string, opts: { lastToken?: bigint; leaderAddr?: string; fromServer?: boolean; cause?: unknown } = {}) {
    super(`leasehold: ${code}: ${message}`, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = "LeaseholdError";
    this.code = code;
    this.lastToken = opts.lastToken;
    this.leaderAddr = opts.leaderAddr;
    this.fromServer = opts.fromServer ?? false;
  }
}

/**
 * LeaseLostError is the reason of a session's and its locks' signal when
 * the lease may be lost: the local safe deadline passed without a
 * confirmed renewal, or the server said the lease expired. Stop the
 * critical section.
 */
export class LeaseLostError extends Error {
  constructor(message: string, opts?: { cause?: unknown }) {
    super(`leasehold: lease may be lost: ${message}`, opts);
    this.name = "LeaseLostError";
  }
}

/** SessionClosedError is the signal reason after Session.close. */
export class SessionClosedError extends Error {
  constructor() {
    super("leasehold: session closed");
    this.name = "SessionClosedError";
  }
}

/** ReleasedError is a lock's signal reason after its release. */
export class ReleasedError extends Error {
  constructor() {
    super("leasehold: lock released");
    this.name = "ReleasedError";
  }
}

/** isCode reports whether err is a LeaseholdError with code. */
export function isCode(err: unknown, code: Code): boolean {
  return err instanceof LeaseholdError && err.code === code;
}

/**
 * serverError extracts the leasehold error of a ConnectError a leasehold
 * server answered with (ErrorDetail first, then the Leasehold-Code header),
 * or returns undefined when no server code is present (a transport error).
 */
export function serverError(err: ConnectError): LeaseholdError | undefined {
  const det = err.findDetails(ErrorDetailSchema)[0];
  if (det && det.code !== "") {
    return new LeaseholdError(det.code as Code, err.rawMessage, {
      lastToken: det.lastToken === 0n ? undefined : det.lastToken,
      leaderAddr: det.leaderApiAddr === "" ? undefined : det.leaderApiAddr,
      fromServer: true,
      cause: err,
    });
  }
  const header = err.metadata.get(codeHeader);
  if (header) {
    return new LeaseholdError(header as Code, err.rawMessage, { fromServer: true, cause: err });
  }
  return undefined;
}

/** codeOfRpc maps an RPC status code without a leasehold code to one. */
export function codeOfRpc(c: RpcCode): Code {
  switch (c) {
    case RpcCode.InvalidArgument:
    case RpcCode.OutOfRange:
      return Code.InvalidArgument;
    case RpcCode.DeadlineExceeded:
      return Code.DeadlineExceeded;
    case RpcCode.Canceled:
      return Code.Canceled;
    case RpcCode.ResourceExhausted:
      return Code.ResourceExhausted;
    case RpcCode.PermissionDenied:
    case RpcCode.Unauthenticated:
      return Code.PermissionDenied;
    case RpcCode.Unavailable:
      return Code.Unavailable;
    case RpcCode.NotFound:
      return Code.NotFound;
  }
  return Code.Internal;
}
