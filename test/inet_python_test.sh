#!/usr/bin/env bash
# Networking inside one sandbox with a real program: python3 runs an
# http.server on the sandbox's loopback (port chosen by bind to 0) in a
# thread and fetches a page from it with urllib, over 127.0.0.1 and over
# "localhost" (the resolver), then a threaded server answers 20 clients at
# once. The same script runs natively and in the sandbox; the outputs must
# agree.
#
# usage: inet_python_test.sh SENTRY
set -u
# shellcheck source=test/lib.sh
. "$(dirname "$0")/lib.sh"
usage_unless [ $# -eq 1 ] -- "SENTRY"
SENTRY=$1
require_sentry "$SENTRY"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "no /usr/bin/python3"
make_tmp inet_python

script='
import http.server, socketserver, threading, urllib.request, concurrent.futures
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello from " + self.path).encode() * 100
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
srv = S(("127.0.0.1", 0), H)
port = srv.server_address[1]
threading.Thread(target=srv.serve_forever, daemon=True).start()
for host in ("127.0.0.1", "localhost"):
    with urllib.request.urlopen("http://%s:%d/page" % (host, port), timeout=20) as r:
        data = r.read()
        print(host, r.status, len(data), data[:15].decode())
def get(i):
    with urllib.request.urlopen("http://127.0.0.1:%d/c%d" % (port, i), timeout=20) as r:
        return len(r.read())
with concurrent.futures.ThreadPoolExecutor(20) as ex:
    sizes = list(ex.map(get, range(20)))
print("20 clients", sum(sizes))
srv.shutdown()
print("done")
'

capture 120 env -i PATH=/usr/bin:/bin "$PY" -c "$script"
native_status=$status
cp "$tmp/out" "$tmp/native.out"
check "native run works" eq "$native_status" 0
capture 120 "$SENTRY" run --env=PATH=/usr/bin:/bin -- "$PY" -c "$script"
CHECK_OUT_BYTES=2000 check "python3 http.server and urllib in the sandbox" eq "$status" 0
check "same output as natively" cmp -s "$tmp/native.out" "$tmp/out"
passed
