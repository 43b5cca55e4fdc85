"""`make fuzz`: schemathesis against a live `python -m minicb serve` (Bard, --api-key, --enable-debug-trace),
driven by the server's own /openapi.json. It fails on any 5xx, and on any answer whose status, content type,
headers or body the schema does not describe. Extra arguments go to `st run`, e.g. --max-time 600."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from minicb.serve.server_process import start_server

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,"
          "response_schema_conformance,allow_header_conformance")
KEY = "fuzz"


def main(extra: list[str]) -> int:
    st = Path(sys.executable).with_name("st")
    with start_server("--api-key", KEY, "--enable-debug-trace", "--max-num-seqs", "16") as server:
        return subprocess.call([str(st), "run", server.url + "/openapi.json", "--checks", CHECKS,
                                "--header", f"Authorization: Bearer {KEY}", "--request-timeout", "60",
                                "--workers", "2", *extra])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
