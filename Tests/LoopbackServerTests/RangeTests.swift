import Foundation
import LoopbackServer
import Testing

@Suite("Ranges", .timeLimit(.minutes(3)))
struct RangeTests {
    @Test("bytes=a-b gives a 206 with absolute pattern offsets", arguments: [
        ("bytes=10-19", 10, 19),
        ("bytes=90-", 90, 99),
        ("bytes=95-500", 95, 99),
        ("bytes=0-0", 0, 0),
        ("bytes=-10", 90, 99),
        ("bytes=-500", 0, 99),
    ])
    func partial(range: String, first: Int, last: Int) throws {
        try withServer { server in
            let response = try RawClient(port: server.port).get("/bytes/100", headers: [("Range", range)])
            #expect(response.status == 206)
            #expect(response.headers["Content-Range"] == "bytes \(first)-\(last)/100")
            #expect(response.headers["Content-Length"] == String(last - first + 1))
            #expect(response.headers["ETag"] == "\"bytes-100\"")
            #expect(response.body == BytePattern.data(offset: first, count: last - first + 1))
        }
    }

    @Test("an unsatisfiable range is a 416 with bytes */n")
    func unsatisfiable() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            for range in ["bytes=100-", "bytes=100-200", "bytes=-0"] {
                let response = try client.get("/bytes/100", headers: [("Range", range)])
                #expect(response.status == 416, "\(range)")
                #expect(response.headers["Content-Range"] == "bytes */100")
                #expect(response.body.isEmpty)
            }
        }
    }

    @Test("malformed and multi-part ranges are ignored: 200 with the whole body")
    func ignoredRanges() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            for range in ["bytes=20-10", "bytes=0-1,5-6", "items=0-5", "bytes=x-y"] {
                let response = try client.get("/bytes/100", headers: [("Range", range)])
                #expect(response.status == 200, "\(range)")
                #expect(response.body == BytePattern.data(offset: 0, count: 100))
            }
        }
    }

    @Test("If-Range: the current ETag keeps the range, anything else gets the whole body")
    func ifRange() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let matching = try client.get("/bytes/100", headers: [("Range", "bytes=50-"), ("If-Range", "\"bytes-100\"")])
            #expect(matching.status == 206)
            #expect(matching.body == BytePattern.data(offset: 50, count: 50))

            let changed = try client.get("/bytes/100", headers: [("Range", "bytes=50-"), ("If-Range", "\"bytes-99\"")])
            #expect(changed.status == 200)
            #expect(changed.headers["Content-Range"] == nil)
            #expect(changed.body == BytePattern.data(offset: 0, count: 100))

            let date = try client.get("/bytes/100", headers: [
                ("Range", "bytes=50-"), ("If-Range", LoopbackServer.fixedLastModified),
            ])
            #expect(date.status == 200)
        }
    }

    @Test("a range across the pattern buffer's end of a large body")
    func largeRange() throws {
        try withServer { server in
            let client = try RawClient(port: server.port)
            let first = 1_028_000
            let last = 3_100_000
            try client.sendRequest("GET", "/bytes/5000000", headers: [("Range", "bytes=\(first)-\(last)")])
            let head = try client.readHead()
            #expect(head.status == 206)
            #expect(head.headers["Content-Range"] == "bytes \(first)-\(last)/5000000")
            #expect(try client.verifyPatternBody(count: last - first + 1, offset: first) == nil)
        }
    }

    @Test("/bytes-norange ignores Range")
    func noRange() throws {
        try withServer { server in
            let response = try RawClient(port: server.port).get("/bytes-norange/100", headers: [("Range", "bytes=10-19")])
            #expect(response.status == 200)
            #expect(response.headers["Accept-Ranges"] == nil)
            #expect(response.headers["Content-Range"] == nil)
            #expect(response.headers["ETag"] == "\"norange-100\"")
            #expect(response.body == BytePattern.data(offset: 0, count: 100))
        }
    }
}
