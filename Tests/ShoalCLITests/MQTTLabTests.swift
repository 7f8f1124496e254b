import Foundation
import ShoalTesting
import Testing

extension ProcessSuites {
    /// The MQTT bridge across the mesh as it is deployed: two gateways, each in a network namespace
    /// of its own (NetLab) with its own mosquitto on its own loopback, finding each other through
    /// real Avahi on the lab's link — no static peers. A message published on one site's broker
    /// reaches the other site's broker through the mesh, once.
    @Suite("MQTT bridge in the network lab", .serialized,
           .enabled(if: NetLab.available && Mosquitto.available, "needs root, iproute2, dbus, avahi-daemon, avahi-utils, mosquitto and mosquitto-clients"))
    struct MQTTLabTests {
        @Test("two gateways in namespaces, each with its own mosquitto: published on g1's broker, the document reaches g2 over the mesh and g2's broker once; nothing loops")
        func acrossTheMesh() throws {
            let lab = try NetLab(nodes: 2)
            defer { lab.teardown() }
            let ids = try NetLabTests.identities(lab)
            let brokers = try lab.nodes.map { try Mosquitto(.init(netns: $0.ns)) }
            defer { for b in brokers { b.remove() } }
            let mqtt = { (i: Int) in
                """
                mqtt:
                  brokers:
                    - name: site
                      url: \(brokers[i].url)
                      clientId: shoal-g\(i + 1)
                      reconnect: { minMillis: 100, maxMillis: 1000 }
                      inbound:
                        - { topic: "sensors/+site/+device/state", collection: sensors.readings, id: "{site}-{device}" }
                        - { topic: "shoal/sensors.readings/+id", collection: sensors.readings, id: "{id}" }
                      outbound:
                        - { collection: sensors.readings, topic: "shoal/{collection}/{id}" }
                http: {enabled: false}
                """
            }
            let gateways = try lab.nodes.indices.map { i in
                try lab.startGateway(lab.nodes[i], site: try NetLabTests.site(lab, "g\(i + 1)", group: "lab.mqtt", allowed: ids, extra: mqtt(i)))
            }
            for (i, b) in brokers.enumerated() {
                #expect(b.waitForSubscription(clientID: "shoal-g\(i + 1)", filter: "sensors/+/+/state"), "g\(i + 1)'s broker: \(b.diagnostics())")
            }
            let watch = try brokers.enumerated().map { i, b in try MQTTTools.subscribe(b, filter: "shoal/#", count: 100, id: "watch-\(i + 1)", timeout: 90) }
            for (i, b) in brokers.enumerated() { #expect(b.waitForSubscription(clientID: "watch-\(i + 1)", filter: "shoal/#")) }
            // The two gateways link through Avahi (no static peers).
            #expect(eventuallyBlocking(within: 45) { gateways.allSatisfy { (($0.status()["mesh"] as? [String: Any])?["connectedPeers"] as? Int ?? 0) >= 1 } },
                    "\(gateways.map { $0.linkLog(last: 20) }.joined(separator: "\n"))")

            try MQTTTools.publish(brokers[0], topic: "sensors/north/boiler/state", message: #"{"t":71.5}"#)
            #expect(eventuallyBlocking(within: 60) { watch[1].messages().contains { $0.topic == "shoal/sensors.readings/north-boiler" } },
                    "g2's broker: \(watch[1].output()) g2: \(gateways[1].linkLog(last: 20))")
            Thread.sleep(forTimeInterval: 3)  // a loop would have published again by now
            for (i, w) in watch.enumerated() {
                let got = w.messages().filter { $0.topic == "shoal/sensors.readings/north-boiler" }
                #expect(got.map(\.payload) == [#"{"t":71.5}"#], "g\(i + 1)'s broker: \(w.output())")
                w.stop()
            }
            for g in gateways {
                #expect(g.get("north-boiler") == #"{"t":71.5}"#)
                let doc = (try? Shoal.json(g.cli(["doc", "get", "sensors.readings", "north-boiler", "--json"]))) as? [String: Any]
                #expect(doc?["revision"] as? Int == 1, "\(String(describing: doc))")
            }
            for g in gateways { g.stop() }
        }
    }
}
