import ShoalCore
import ShoalWire

/// A hub message (the uplink's, see `HubLayout`) read as a document version of one collection.
public struct HubDocument: Sendable {
    public let id: String
    /// The version as the hub holds it (format 1: no field stamps); `checked` has the stamps when
    /// the message carried them (`HubHeader.fields`).
    public let version: [UInt8]
    /// The gateway that published it.
    public let origin: PeerID
    /// Ready for `RemoteApply`: version decoded, body checked against its digest and the limit.
    public let checked: CheckedDocument

    /// What a message on `collection`'s stream holds: a document version, or why it is not one (a
    /// message that is not Shoal's, or is damaged: never applied).
    public static func read(subject: String, headers: [String: String], payload: [UInt8], collection: CollectionName,
                            layout: HubLayout, maxBodyBytes: Int) -> Result<HubDocument, Foreign> {
        guard let id = layout.documentID(subject: subject, in: collection) else {
            return .failure(Foreign("the subject does not name a document of \(collection)"))
        }
        guard let versionHex = headers[HubHeader.version] else { return .failure(Foreign("no \(HubHeader.version) header")) }
        guard let version = HubHeader.bytes(hex: versionHex) else { return .failure(Foreign("\(HubHeader.version) is not hex")) }
        guard let originHex = headers[HubHeader.origin], let origin = PeerID(hex: originHex) else {
            return .failure(Foreign("no peer id in \(HubHeader.origin)"))
        }
        let deleted = headers[HubHeader.deleted] == "true"
        if deleted, !payload.isEmpty { return .failure(Foreign("a tombstone with a body")) }
        // The stamps, when they belong to this very version; otherwise (damaged, or another
        // version's) the message counts as whole-document, never as foreign.
        var full = version
        if let hex = headers[HubHeader.fields], let stamped = HubHeader.bytes(hex: hex),
           stamped.first == DocumentVersion.fieldsFormatByte, DocumentVersion.documentLevel(stamped) == DocumentVersion.documentLevel(version),
           (try? DocumentVersion(decoding: stamped)) != nil {
            full = stamped
        }
        let checked = CheckedDocument(checking: ReplicationMessage.DocumentBody(id: id, deleted: deleted, version: full, body: payload),
                                      maxBodyBytes: maxBodyBytes)
        if let problem = checked.problem { return .failure(Foreign(problem)) }
        return .success(HubDocument(id: id, version: DocumentVersion.documentLevel(version), origin: origin, checked: checked))
    }

    /// Why a hub message is not a document version.
    public struct Foreign: Error, Sendable, CustomStringConvertible {
        public let reason: String
        init(_ reason: String) { self.reason = reason }
        public var description: String { reason }
    }
}
