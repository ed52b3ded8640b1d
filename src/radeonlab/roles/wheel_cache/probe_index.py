"""Run by python3 on the cache host (read by the WheelCacheState fact, passed with -c): prints "ok" when
the URL given as the argument answers HTTP 200 (the cache is being served), else nothing. Stdlib only."""

import sys
import urllib.request

try:
    ok = urllib.request.urlopen(sys.argv[1], timeout=3).status == 200
except Exception:
    ok = False
print("ok" if ok else "")
