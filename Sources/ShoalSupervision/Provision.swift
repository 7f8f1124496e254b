import ShoalCore
import ShoalThreads

/// A value one child of a supervisor hands to the siblings started after it: the store service
/// provides the open store, the identity service the identity. The supervisor starts a child only
/// once the children before it are ready, so a later sibling's `ChildSpec.make` takes the value
/// (`try provision.value()`) when it is made, and the service gets it as a plain dependency: no
/// locator, no polling for readiness. With rest_for_one, a provider's restart restarts those who
/// took its value, and they take the new one.
public final class Provision<Value: Sendable>: Sendable {
    public let name: String
    private let slot = Locked<Value?>(nil)

    public init(_ name: String) { self.name = name }

    /// Called by the provider before it says it is ready.
    public func provide(_ value: Value) { slot.withLock { $0 = value } }

    /// Called by the provider when what it provided goes away (it stops or crashes).
    public func withdraw() { slot.withLock { $0 = nil } }

    /// The value, for a `ChildSpec.make`: when it is missing (the provider was not ready, which a
    /// supervisor that waits for readiness never lets happen) the child counts as crashed.
    public func value() throws(ProvisionMissing) -> Value {
        guard let v = slot.withLock({ $0 }) else { throw ProvisionMissing(name: name) }
        return v
    }

    /// What is provided now, for observers (status); nil while the provider is not ready.
    public var current: Value? { slot.withLock { $0 } }
}

/// A child was made before what it depends on was provided.
public struct ProvisionMissing: Error, Sendable, CustomStringConvertible {
    public let name: String
    public var description: String { "\(name) is not provided (its service is not ready)" }
}
