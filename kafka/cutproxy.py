#!/usr/bin/env python3
"""The TCP proxies of an isolatable three-node cluster (kafka/broker cluster
start --isolatable): every connection between two nodes (replication, the
transaction coordinator's markers, the controller quorum) and every client
connection runs through one of them, so one node can be cut off the others,
and, with --clients, off its clients too.

    cutproxy.py DIR

DIR/routes lists one route a line: `LISTEN TARGET FROM TO` (ports, then node
numbers; FROM 0 is the clients). DIR/isolated lists the isolated nodes, one a
line: `N` (cut off the other nodes) or `N clients` (and off its clients); the
proxy reads it again within 100 ms of a change (kafka/broker cluster isolate
and heal write it).

A cut is a network partition, not a closed connection: nothing is forwarded
either way and every socket stays open (no FIN, no RST), so only the peers'
own timeouts tell them. Bytes read before the cut are held and forwarded at
the heal, then everything else on the same connections (TCP would retransmit
them); a connection opened during a cut is accepted and its upstream made at
the heal. Each change and each connection's held bytes are logged to
DIR/proxy.log.
"""

import asyncio
import os
import sys
import time


class Cuts:
    def __init__(self, path, log):
        self.path = path
        self.log = log
        self.stamp = None
        self.isolated = {}
        self.changed = asyncio.Event()

    def reload(self):
        try:
            stamp = os.stat(self.path).st_mtime_ns
            with open(self.path) as f:
                text = f.read()
        except FileNotFoundError:
            stamp, text = None, ""
        if stamp == self.stamp:
            return
        self.stamp = stamp
        isolated = {}
        for line in text.splitlines():
            words = line.split()
            if words:
                isolated[int(words[0])] = "clients" in words[1:]
        if isolated != self.isolated:
            self.isolated = isolated
            self.log(f"isolated: {isolated or 'none'}")
            changed, self.changed = self.changed, asyncio.Event()
            changed.set()

    def cut(self, src, dst):
        for node, clients in self.isolated.items():
            if src == 0:
                if dst == node and clients:
                    return True
            elif node in (src, dst):
                return True
        return False

    async def wait_open(self, src, dst):
        """Returns once the route is not cut; True if it waited."""
        waited = False
        while self.cut(src, dst):
            waited = True
            await self.changed.wait()
        return waited


async def pump(reader, writer, src, dst, cuts, held):
    try:
        while True:
            await cuts.wait_open(src, dst)
            data = await reader.read(1 << 16)
            if not data:
                break
            if await cuts.wait_open(src, dst):
                held[0] += len(data)
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


def serve(target, src, dst, cuts, log):
    async def handle(client_reader, client_writer):
        await cuts.wait_open(src, dst)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        held = [0]
        await asyncio.gather(
            pump(client_reader, up_writer, src, dst, cuts, held),
            pump(up_reader, client_writer, dst, src, cuts, held),
        )
        client_writer.close()
        up_writer.close()
        if held[0]:
            log(f"route {src}->{dst}: a connection forwarded {held[0]} bytes held by a cut")

    return handle


async def main(directory):
    logfile = open(os.path.join(directory, "proxy.log"), "a", buffering=1)

    def log(message):
        logfile.write(f"{time.strftime('%H:%M:%S')} {message}\n")

    cuts = Cuts(os.path.join(directory, "isolated"), log)
    cuts.reload()
    servers = []
    with open(os.path.join(directory, "routes")) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            listen, target, src, dst = (int(w) for w in words)
            servers.append(
                await asyncio.start_server(
                    serve(target, src, dst, cuts, log), "127.0.0.1", listen, reuse_address=True
                )
            )
    log(f"{len(servers)} routes up")
    with open(os.path.join(directory, "proxy.ready"), "w") as ready:
        ready.write(str(os.getpid()))
    while True:
        await asyncio.sleep(0.1)
        cuts.reload()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: cutproxy.py DIR")
    asyncio.run(main(sys.argv[1]))
