// @leasehold/client: the TypeScript client of leasehold.
export { Client, connect, type CallOptions, type ConnectOptions, type LeaseholdRpc } from "./client.js";
export { Session, type AcquireOptions, type Lock, type SessionOptions } from "./session.js";
export { Code, codeHeader, isCode, LeaseholdError, LeaseLostError, ReleasedError, SessionClosedError } from "./errors.js";
export { EventType, type Event, type Holding, type LockInfo, type WatchCompacted } from "./gen/leasehold/v1/leasehold_pb.js";
