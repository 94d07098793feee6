"""Free loopback ports for tests that start several processes of one DTensor mesh (not a test itself)."""
import socket


def FreePorts(n):
  socks = [socket.socket() for _ in range(n)]
  for s in socks:
    s.bind(('127.0.0.1', 0))
  ports = [s.getsockname()[1] for s in socks]
  for s in socks:
    s.close()
  return ports
