/// The web console served at `/`: one page, everything inline, nothing fetched from elsewhere.
enum ConsolePage {
    static let html = """
        <!doctype html><html><head><meta charset="utf-8"><title>Shoal</title></head>
        <body><h1>Shoal</h1><p>The console comes here; the API is at <a href="/v1/status">/v1/status</a>.</p></body></html>
        """
}
