"""Multi-node rendezvous over real TCP (TEST EQUIPMENT, not SGLang; stands in for torch.distributed's TCPStore).

With ``--nnodes N``, node rank 0 listens on the port of ``--dist-init-addr`` and every other rank connects to that
address (retrying, as the TCPStore client does) and says its rank. Nobody starts its schedulers until all N nodes
joined. The connections stay open afterwards, standing in for NCCL's sockets: when a peer node dies (its socket
closes), the survivor logs an NCCL-style ``NCCL WARN`` line and goes down, as a real cluster does when a rank is lost.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

from sglang._sim import runtime


def _log(msg: str) -> None:
    runtime.write_all(2, f"[{runtime.now_stamp()}] {msg}\n".encode())


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def _readline(sock: socket.socket) -> str:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return buf.decode().strip()


def _watch(sock: socket.socket, peer: str, on_lost: Callable[[str], None]) -> None:
    def run() -> None:
        try:
            while sock.recv(1024):
                pass
        except OSError:
            pass
        on_lost(peer)

    threading.Thread(target=run, name=f"rdzv-{peer}", daemon=True).start()


def join(dist_init_addr: str, nnodes: int, node_rank: int, on_lost: Callable[[str], None],
         timeout: float = 600.0) -> list[socket.socket]:
    host, port = _split(dist_init_addr)
    deadline = time.monotonic() + timeout
    _log(f"Init torch distributed begin. node_rank={node_rank} nnodes={nnodes} dist_init_addr={dist_init_addr}")
    if node_rank == 0:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(64)
        srv.settimeout(5.0)
        peers: dict[int, socket.socket] = {}
        while len(peers) < nnodes - 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"torch.distributed rendezvous timed out: {len(peers) + 1}/{nnodes} nodes joined "
                                   f"at {dist_init_addr}")
            try:
                conn, addr = srv.accept()
            except TimeoutError:
                _log(f"Waiting for {nnodes - 1 - len(peers)} more node(s) to join at {dist_init_addr}")
                continue
            conn.settimeout(10)
            try:
                rank = int(_readline(conn).split()[1])
            except (OSError, ValueError, IndexError):
                conn.close()
                continue
            conn.settimeout(None)
            peers[rank] = conn
            _log(f"Node rank {rank} joined from {addr[0]}")
        srv.close()
        for conn in peers.values():
            conn.sendall(b"go\n")
        for rank, conn in peers.items():
            _watch(conn, f"node rank {rank}", on_lost)
        socks = list(peers.values())
    else:
        last_note = 0.0
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=2.0)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"torch.distributed rendezvous timed out connecting to {dist_init_addr}: {e}") from None
                if time.monotonic() - last_note > 5:
                    _log(f"Waiting for node rank 0 at {dist_init_addr} ({e.strerror or e})")
                    last_note = time.monotonic()
                time.sleep(0.05)
        sock.sendall(f"rank {node_rank}\n".encode())
        sock.settimeout(max(1.0, deadline - time.monotonic()))
        if _readline(sock) != "go":
            raise RuntimeError("torch.distributed rendezvous: unexpected answer from node rank 0")
        sock.settimeout(None)
        _watch(sock, "node rank 0", on_lost)
        socks = [sock]
    _log(f"Init torch distributed ends. All {nnodes} nodes joined.")
    return socks
