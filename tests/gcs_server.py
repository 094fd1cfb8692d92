"""A Google Cloud Storage server on 127.0.0.1 for the gs:// tests: the `gcp-storage-emulator`
package (a real HTTP server implementing the GCS JSON API), reachable by every client the project
uses.

    python tests/gcs_server.py --ready_file=F [--bucket=NAME ...]

starts it and writes {"env": {...}} to F: the environment variables under which
- TensorStore (Orbax's array storage) talks to it: TENSORSTORE_GCS_HTTP_URL;
- TensorFlow's GCS file system (tf.io.gfile, tf.data, TFRecord writers, TensorBoard, epath's gs://
  backend) reaches it too: TensorFlow has no endpoint setting (www.googleapis.com and
  storage.googleapis.com are built in), but its libcurl honours HTTPS_PROXY and CURL_CA_BUNDLE, so
  a CONNECT proxy here terminates TLS for those hosts with a certificate of a CA made for this
  server, and passes the requests on to the emulator unchanged;
- both authenticate with GOOGLE_AUTH_TOKEN_FOR_TESTING (the emulator checks no token).

Five faults of the emulator (2026.7.19) are corrected here, at its HTTP layer only: it serves one
connection at a time (TensorFlow keeps connections open, so others stalled until timeouts: now a
thread per connection and HTTP/1.1, which also answers `Expect: 100-continue`); it reads a request
body by Content-Length where the request also says `Transfer-Encoding: chunked` (HTTP/1.1 says
chunked wins; libcurl sends both); an upload with an empty body crashed it (directory markers are
empty objects); a download lacked the `x-goog-generation` header that GCS sends and
TensorStore's conditional reads need; and uploads and deletions ignored `ifGenerationMatch`, the
precondition with which GCS makes a write conditional (412 when the object's generation differs,
0 meaning "does not exist"): the workdir lock's exclusive create rests on it.
"""

import argparse
import datetime
import http
import http.server
import json
import os
import socket
import ssl
import sys
import threading
import time

HOSTS = ('www.googleapis.com', 'storage.googleapis.com', 'oauth2.googleapis.com')


def _patch_emulator():
  from gcp_storage_emulator import server as emulator
  original_read = emulator._read_data
  lock = threading.Lock()

  def read_data(handler, query):
    if (handler.headers.get('Transfer-Encoding') or '').lower() == 'chunked':
      del handler.headers['Content-Length']  # chunked framing wins (RFC 9112, 6.3)
    data = original_read(handler, query)
    return b'' if data is None and query.get('uploadType') else data

  original_handle = emulator.Router.handle

  def handle(self, method):
    with lock:  # the emulator's storage is not made for concurrent requests
      return original_handle(self, method)

  from gcp_storage_emulator.handlers import objects
  original_download = objects.download

  def download(request, response, storage, *args, **kwargs):
    original_download(request, response, storage, *args, **kwargs)
    if response.status.value in (200, 206):  # the generation, as GCS sends it with the data
      obj = storage.get_file_obj(request.params['bucket_name'], request.params['object_id'])
      response['x-goog-generation'] = obj['generation']
      response['x-goog-metageneration'] = obj['metageneration']

  def precondition(original, name_of):
    """`original` run only when the object's generation matches `ifGenerationMatch` (if given)."""
    def handler(request, response, storage, *args, **kwargs):
      wanted = (request.query.get('ifGenerationMatch') or [None])[0]
      if wanted is not None:
        try:
          current = storage.get_file_obj(request.params['bucket_name'], name_of(request))
          generation = str(current['generation'])
        except Exception:
          generation = '0'  # no such object
        if generation != wanted:
          _ = request.data  # the body read away: the connection's next request starts after it
          response.status = http.HTTPStatus.PRECONDITION_FAILED
          response.json({'error': {'code': 412, 'message': 'conditionNotMet'}})
          return None
      return original(request, response, storage, *args, **kwargs)
    return handler

  query_name = lambda request: (request.query.get('name') or [''])[0]
  replaced = {original_download: download,
              objects.insert: precondition(objects.insert, query_name),
              objects.delete: precondition(objects.delete,
                                           lambda request: request.params['object_id'])}
  for _, methods in emulator.HANDLERS:
    for method, handler in methods.items():
      if handler in replaced:
        methods[method] = replaced[handler]
  objects.download, objects.insert, objects.delete = (
      replaced[original_download], replaced[objects.insert], replaced[objects.delete])
  emulator._read_data = read_data
  emulator.Router.handle = handle
  emulator.RequestHandler.protocol_version = 'HTTP/1.1'

  class Threading(http.server.ThreadingHTTPServer):
    daemon_threads = True

  emulator.server.HTTPServer = Threading
  return emulator


def _certificates(directory: str) -> tuple[str, str, str]:
  """(CA certificate, server certificate for HOSTS, its key) as PEM files in `directory`."""
  from cryptography import x509
  from cryptography.hazmat.primitives import hashes, serialization
  from cryptography.hazmat.primitives.asymmetric import ec
  from cryptography.x509.oid import NameOID
  now = datetime.datetime.now(datetime.timezone.utc)
  valid = dict(not_valid_before=now - datetime.timedelta(days=1),
               not_valid_after=now + datetime.timedelta(days=7))
  ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
  ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, 'electra_jax test storage CA')])
  ca = (x509.CertificateBuilder(subject_name=ca_name, issuer_name=ca_name,
                                public_key=ca_key.public_key(),
                                serial_number=x509.random_serial_number(), **valid)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256()))
  leaf = (x509.CertificateBuilder(
      subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOSTS[0])]),
      issuer_name=ca_name, public_key=key.public_key(),
      serial_number=x509.random_serial_number(), **valid)
          .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in HOSTS]),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
  paths = [os.path.join(directory, n) for n in ('ca.pem', 'server.pem', 'server.key')]
  pem = serialization.Encoding.PEM
  for path, data in zip(paths, (ca.public_bytes(pem), leaf.public_bytes(pem), key.private_bytes(
      pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))):
    with open(path, 'wb') as f:
      f.write(data)
  return paths[0], paths[1], paths[2]


def _pipe(a: socket.socket, b: socket.socket):
  """Copies bytes both ways until either side closes."""
  def one_way(src, dst):
    try:
      while data := src.recv(1 << 16):
        dst.sendall(data)
    except OSError:
      pass
    for s in (src, dst):
      try:
        s.shutdown(socket.SHUT_RDWR)
      except OSError:
        pass
  other = threading.Thread(target=one_way, args=(b, a), daemon=True)
  other.start()
  one_way(a, b)
  other.join()
  a.close()
  b.close()


def _head(conn: socket.socket) -> bytes:
  data = b''
  while not data.endswith(b'\r\n\r\n'):
    byte = conn.recv(1)
    if not byte:
      break
    data += byte
  return data


def serve_proxy(upstream_port: int, cert: str, key: str) -> int:
  """A CONNECT proxy on 127.0.0.1 whose tunnels end in TLS here and continue to the emulator;
  plain `GET http://host/path` requests (upload session URLs) go there too. Returns its port."""
  context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
  context.load_cert_chain(cert, key)
  listener = socket.create_server(('127.0.0.1', 0))

  def handle(conn):
    try:
      head = _head(conn)
      method, target, _ = head.split(b'\r\n', 1)[0].decode().split(' ', 2)
      upstream = socket.create_connection(('127.0.0.1', upstream_port))
      if method == 'CONNECT':
        conn.sendall(b'HTTP/1.1 200 Connection established\r\n\r\n')
        conn = context.wrap_socket(conn, server_side=True)
      elif '://' in target:
        path = '/' + target.split('://', 1)[1].partition('/')[2]
        upstream.sendall(head.replace(target.encode(), path.encode(), 1))
      else:
        upstream.sendall(head)
      _pipe(conn, upstream)
    except (OSError, ValueError):
      conn.close()

  def accept():
    while True:
      conn, _ = listener.accept()
      threading.Thread(target=handle, args=(conn,), daemon=True).start()

  threading.Thread(target=accept, daemon=True).start()
  return listener.getsockname()[1]


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--ready_file', required=True)
  parser.add_argument('--bucket', action='append', default=[])
  args = parser.parse_args()
  emulator = _patch_emulator()
  server = emulator.create_server('127.0.0.1', 0, in_memory=True)
  server.start()
  while server._api._httpd is None:
    time.sleep(0.01)
  port = server._api._httpd.server_address[1]
  for bucket in args.bucket:
    from gcp_storage_emulator.handlers import buckets
    buckets.create_bucket(bucket, server._storage)
  ca, cert, key = _certificates(os.path.dirname(os.path.abspath(args.ready_file)))  # beside F
  proxy = serve_proxy(port, cert, key)
  env = {'TENSORSTORE_GCS_HTTP_URL': f'http://127.0.0.1:{port}',
         'HTTPS_PROXY': f'http://127.0.0.1:{proxy}', 'https_proxy': f'http://127.0.0.1:{proxy}',
         'http_proxy': f'http://127.0.0.1:{proxy}', 'NO_PROXY': '127.0.0.1,localhost',
         'no_proxy': '127.0.0.1,localhost', 'CURL_CA_BUNDLE': ca,
         'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'test-token', 'STORAGE_EMULATOR_HOST':
         f'http://127.0.0.1:{port}'}
  tmp = args.ready_file + '.tmp'
  with open(tmp, 'w') as f:
    json.dump({'env': env, 'port': port, 'proxy_port': proxy, 'pid': os.getpid()}, f)
  os.replace(tmp, args.ready_file)
  try:
    while True:
      time.sleep(3600)
  except KeyboardInterrupt:
    sys.exit(0)


if __name__ == '__main__':
  main()
