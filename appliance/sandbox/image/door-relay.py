#!/usr/bin/python3
"""The in-sandbox end of the model door: 127.0.0.1:PORT <-> the unix socket bind-mounted from the host.

The sandbox has no network (--network=none); this relay is the only way out, and it reaches only the
host-side door, which relays to the model proxy. Usage: appliance-door PORT SOCKET
"""
import asyncio
import socket
import sys


async def pump(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # pass a half-close on; the answer may still be coming
    except (ConnectionError, OSError):
        pass


async def handle(reader, writer, path):
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(path)
    except OSError:
        writer.close()
        return
    try:
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
    finally:
        writer.close()
        up_writer.close()


async def main(port, path):
    server = await asyncio.start_server(lambda r, w: handle(r, w, path), "127.0.0.1", port)
    # Tell the host door we listen: a connection that closes without a byte marks the door ready.
    hello = socket.socket(socket.AF_UNIX)
    try:
        hello.connect(path)
    finally:
        hello.close()
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
