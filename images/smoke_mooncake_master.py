"""Smoke-run the Mooncake master the way images/mooncake.Dockerfile ships it, without Docker.

Downloads the pinned wheel (``pip download``) and the apt packages the Dockerfile installs for it
(``apt-get download``; their own dependencies libnl-3-200 and libnl-route-3-200, which apt would pull
in, are listed here), unpacks both into a temporary directory, then runs the wheel's
``mooncake_master`` with the arguments the operator renders (``render_kv.mooncake_master``; the pod IP
replaced by 127.0.0.1, the ports by free ones): first without the apt libraries (it must fail to load, as the old image did),
then with them (its RPC port must accept a connection and its /metrics answer). Needs network access
to PyPI and a Debian/Ubuntu apt source; about 100 MB of downloads. Exit 0 when both hold.

Usage: python images/smoke_mooncake_master.py
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

IMAGES = Path(__file__).resolve().parent
APT_RUNTIME = ("libibverbs1", "ibverbs-providers", "libnl-3-200", "libnl-route-3-200")
START_TIMEOUT_S = 20.0
STEP_TIMEOUT_S = 600


def pinned() -> str:
    text = (IMAGES / "mooncake.Dockerfile").read_text(encoding="utf-8")
    version = re.search(r"^ARG MOONCAKE_VERSION=(\S+)$", text, flags=re.M)
    package = re.search(r'"(mooncake-transfer-engine[\w-]*)==', text)
    assert version and package, "mooncake.Dockerfile names no Mooncake wheel"
    return f"{package.group(1)}=={version.group(1)}"


def master_args() -> list[str]:
    from smetric.operator.meta import PoolRef
    from smetric.operator.render_kv import mooncake_master
    from smetric.operator.spec import parse_spec

    spec = parse_spec({"model": {"name": "m"}, "topology": {"replicas": 1}, "globalKV": {"enabled": True}})
    (container,) = mooncake_master(PoolRef("smoke", "ns", "uid"), spec)[0]["spec"]["template"]["spec"][
        "containers"
    ]
    ports = {
        "rpc_port": _free_port(),
        "http_metadata_server_port": _free_port(),
        "metrics_port": _free_port(),
    }
    out = []
    for arg in container["args"]:
        name = arg.removeprefix("--").split("=", 1)[0]
        out.append(f"--{name}={ports[name]}" if name in ports else arg.replace("$(POD_IP)", "127.0.0.1"))
    return out


def _free_port() -> int:
    """A free local port (the rendered 50051/8080/9003 may be taken on a shared host)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port(args: list[str], name: str) -> int:
    return int(next(a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
             "--platform", "manylinux_2_28_x86_64", "--index-url", "https://pypi.org/simple", "-d", str(root), pinned()],
            check=True, timeout=STEP_TIMEOUT_S,
        )  # fmt: skip
        (wheel,) = root.glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:  # the binary finds its bundled libraries via $ORIGIN
            archive.extractall(root / "wheel")
        binary = root / "wheel" / "mooncake" / "mooncake_master"
        binary.chmod(0o755)
        subprocess.run(["apt-get", "download", *APT_RUNTIME], cwd=root, check=True, timeout=STEP_TIMEOUT_S)
        for deb in root.glob("*.deb"):
            subprocess.run(
                ["dpkg-deb", "-x", str(deb), str(root / "apt")], check=True, timeout=STEP_TIMEOUT_S
            )
        libs = ":".join(str(p) for p in (root / "apt").glob("**/lib/x86_64-linux-gnu"))
        args = master_args()

        bare = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        print(f"without the apt libraries: rc={bare.returncode} {bare.stderr.strip()[:200]}")
        if bare.returncode == 0 or "error while loading shared libraries" not in bare.stderr:
            print("this host already provides the libraries: the failing half proves nothing here")

        env = {**os.environ, "LD_LIBRARY_PATH": libs}
        proc = subprocess.Popen(
            [str(binary), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            rpc, metrics = _port(args, "rpc_port"), _port(args, "metrics_port")
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                if proc.poll() is not None:
                    output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                    print(
                        f"mooncake_master exited rc={proc.returncode}: {output[-400:]} (LD_LIBRARY_PATH={libs})"
                    )
                    return 1
                try:
                    socket.create_connection(("127.0.0.1", rpc), timeout=1.0).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        print(f"RPC port {rpc} not open after {START_TIMEOUT_S} s")
                        return 1
                    time.sleep(0.2)
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as resp:
                body = resp.read().decode()
            assert "master_allocated_bytes" in body, body[:200]
            print(
                f"with {', '.join(APT_RUNTIME)}: {pinned()} mooncake_master serves RPC :{rpc} and /metrics :{metrics}"
            )
            return 0
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    raise SystemExit(main())
