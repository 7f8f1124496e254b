import ShoalCore
import ShoalStore
import ShoalWire

/// `doc.query`, `doc.index.create`, `doc.index.drop`, `doc.indexes`: queries and indexes of the
/// gateway's store. The query arrives as text (the filter) and small lists (order, fields,
/// aggregates, group by); every part is parsed here and a malformed one is a `bad_request` naming
/// the part and the character.
extension ControlHandler {
    func dispatchQuery(_ op: String, _ r: [String: JSONValue]) throws -> JSONValue? {
        switch op {
        case "doc.query":
            let store = try openStore()
            let collection = try collectionName(r)
            let q = try ControlHandler.query(from: r)
            if r["explain"]?.boolValue == true {
                let plan = try store.explain(q, in: collection)
                return ["collection": .string(collection.description), "sql": .string(plan.sql), "plan": .array(plan.steps.map(JSONValue.string)),
                        "indexesUsed": .array(plan.indexesUsed.map(JSONValue.string)), "scansCollection": .bool(plan.scansCollection)]
            }
            var result = try store.query(q, in: collection)
            var json = try ControlHandler.json(result, q)
            // A page that would not fit one answer is asked again, shorter: the same order gives
            // the same first rows, and its cursor continues after the last one sent.
            while json.compactText.utf8.count > ControlMessage.pageBudgetBytes && (result.rows.count > 1 || result.groups.count > 1) {
                var shorter = q
                shorter.limit = max(1, max(result.rows.count, result.groups.count) / 2)
                result = try store.query(shorter, in: collection)
                json = try ControlHandler.json(result, shorter)
            }
            guard case .object(var o) = json else { return json }
            o["collection"] = .string(collection.description)
            return .object(o)
        case "doc.index.create", "doc.index.drop":
            let store = try openStore()
            let collection = try collectionName(r)
            guard let text = r["fields"]?.stringValue else { throw bad("missing \"fields\" (FIELD[,FIELD…])") }
            let fields: [FieldPath]
            do { fields = try QueryParser.parseFields(text, max: 8) } catch { throw bad("fields \(error)") }
            let changed = op == "doc.index.create"
                ? try store.createIndex(on: collection, fields: fields)
                : try store.dropIndex(on: collection, fields: fields)
            gateway.logger.info(.control, "\(op == "doc.index.create" ? "created" : "dropped") index \(collection) (\(text))")
            return ["collection": .string(collection.description), "fields": .string(fields.map(\.description).joined(separator: ",")), "changed": .bool(changed)]
        case "doc.indexes":
            let store = try openStore()
            let collection = r["collection"] == nil ? nil : try collectionName(r)
            return ["indexes": .array(try store.indexes(collection).map { ix in
                ["collection": .string(ix.collection.description), "fields": .string(ix.fieldList), "name": .string(ix.name)]
            })]
        default:
            return nil
        }
    }

    /// The query of a request: `where` (text), `order` ("a,-b"), `limit`, `offset`, `after`,
    /// `fields` ("a,b"), `aggregate` ("count,avg(x)"), `groupBy` ("a,b").
    static func query(from r: [String: JSONValue]) throws -> Query {
        func part<T>(_ key: String, _ parse: (String) throws(QueryError) -> T) throws -> T? {
            guard let v = r[key] else { return nil }
            guard let text = v.stringValue else { throw ControlError(code: .badRequest, message: "\"\(key)\" is a string") }
            do { return try parse(text) } catch { throw ControlError(code: .badRequest, message: "invalid query: \(key) \(error)") }
        }
        var q = Query()
        q.filter = try part("where") { t throws(QueryError) in try QueryParser.parseFilter(t) } ?? nil
        q.order = try part("order") { t throws(QueryError) in try QueryParser.parseOrder(t) } ?? []
        q.fields = try part("fields") { t throws(QueryError) in try QueryParser.parseFields(t) }
        q.aggregates = try part("aggregate") { t throws(QueryError) in try QueryParser.parseAggregates(t) } ?? []
        q.groupBy = try part("groupBy") { t throws(QueryError) in try QueryParser.parseFields(t, max: QueryLimits.maxGroupBy) } ?? []
        if let v = r["limit"] {
            guard let n = v.int64Value, n >= 1, n <= Int64(QueryLimits.maxLimit) else {
                throw ControlError(code: .badRequest, message: "\"limit\" is 1 to \(QueryLimits.maxLimit)")
            }
            q.limit = Int(n)
        }
        if let v = r["offset"] {
            guard let n = v.int64Value, n >= 0, n <= Int64(QueryLimits.maxOffset) else {
                throw ControlError(code: .badRequest, message: "\"offset\" is 0 to \(QueryLimits.maxOffset)")
            }
            q.offset = Int(n)
        }
        if let v = r["after"] {
            guard let s = v.stringValue else { throw ControlError(code: .badRequest, message: "\"after\" is a cursor string") }
            q.after = s
        }
        return q
    }

    static func json(_ result: QueryResult, _ q: Query) throws -> JSONValue {
        if result.isAggregate {
            return ["groups": .array(result.groups.map { g in
                var o: [String: JSONValue] = [:]
                var key: [String: JSONValue] = [:]
                for (f, k) in zip(q.groupBy, g.keys) { if let k { key[f.description] = k } }
                if !q.groupBy.isEmpty { o["key"] = .object(key) }
                for (a, v) in zip(q.aggregates, g.values) { o[a.description] = v }
                return .object(o)
            })]
        }
        var o: [String: JSONValue] = ["documents": .array(try result.rows.map { row in
            ["id": .string(row.id), "updatedAtMillis": .int(row.updatedAtMillis), "body": try JSONValue.parse(row.body)]
        })]
        if let next = result.nextCursor { o["next"] = .string(next) }
        return .object(o)
    }
}
