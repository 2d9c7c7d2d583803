"""The test's stand-in for ``ssh -N -L PORT:NODE:PORT user@login``: forward a listening socket of
this (root) network namespace to NODE:PORT, reached from the lab's login namespace.

    nsenter --net=/run/netns/<hub> python tunnel.py FD ADDRESS PORT     (FD passed with pass_fds)

The listening socket FD was opened by the caller in the root namespace (where the browser is), and
this process runs in the hub namespace (where the nodes are reachable): every accepted connection is
joined to a new connection to ADDRESS:PORT, byte for byte, in both directions. Ends when killed.
"""

import socket
import sys
import threading


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (sink, source):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main() -> None:
    fd, address, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    listener = socket.socket(fileno=fd)
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection((address, port), timeout=10)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main()
