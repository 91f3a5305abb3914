"""Alloy's HTTP client settings, shared by every component that calls an HTTP API.

Three pieces, so that any component (and any transport library) can use them:
- `HTTP_CLIENT`: the schema items (`bearer_token`, `basic_auth {}`, `authorization {}`,
  `oauth2 {}`, `tls_config {}`, `http_headers`, proxy settings, `follow_redirects`,
  `enable_http2`) to splice into a component's Schema, with `validate_http_client`.
- `HTTPClientConfig`: the decoded settings resolved for a request: `headers()` (credentials
  read from their *_file at each call, as Alloy does, so rotated tokens are picked up),
  `ssl_context()`; `proxy_mounts()` gives its proxy settings as httpx mounts.
- `transport_for`, `request`, `get_json`: requests over http://, https:// and unix:// on httpx
  (export/http_transport.py): HTTP/2 over TLS when `enable_http2` (the default, as in Alloy),
  HTTP/1.1 otherwise and on plain http://, as Go's client; one pooled client per settings.

Secrets (tokens, passwords, header values, a PEM key) are `Secret`s: shown as `(secret)`,
revealed only here, where they leave the process.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import httpx

from ...export.http_transport import Transport, describe
from ..schema import BOOL, SECRET, STRING, Arg, BlockArg, ListOf, MapOf, Schema
from ..secret import Secret, redact_url, reveal

MAX_BODY = 256 << 20   # an API answer larger than this is refused, never buffered whole

_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                 "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


class HTTPError(Exception):
    pass


# -- the schema piece ------------------------------------------------------------------------------
def _validate_tls(t: dict) -> None:
    for what in ("ca", "cert", "key"):
        if t[f"{what}_pem"] and t[f"{what}_file"]:
            raise ValueError(f"tls_config: at most one of {what}_pem and {what}_file must be set")
    if bool(t["cert_pem"] or t["cert_file"]) != bool(t["key_pem"] or t["key_file"]):
        raise ValueError("tls_config: a client certificate needs both a certificate and a key")
    if t["min_version"] and t["min_version"] not in _TLS_VERSIONS:
        raise ValueError(f"tls_config: min_version {t['min_version']!r} is not one of {', '.join(_TLS_VERSIONS)}")


TLS_CONFIG = Schema([
    Arg("ca_pem", STRING, ""), Arg("ca_file", STRING, ""), Arg("cert_pem", STRING, ""), Arg("cert_file", STRING, ""),
    Arg("key_pem", SECRET, Secret()), Arg("key_file", STRING, ""), Arg("server_name", STRING, ""),
    Arg("insecure_skip_verify", BOOL, False), Arg("min_version", STRING, ""),
], validate=_validate_tls)


def _one_of(block: str, inline: str, from_file: str):
    def validate(b: dict) -> None:
        if b[inline] and b[from_file]:
            raise ValueError(f"{block}: at most one of {inline} and {from_file} must be set")
    return validate


def _validate_oauth2(o: dict) -> None:
    _one_of("oauth2", "client_secret", "client_secret_file")(o)
    if (o["client_id"] or o["client_secret"] or o["client_secret_file"]) and not o["token_url"]:
        raise ValueError("oauth2: token_url is required")


_PROXY_ITEMS = [Arg("proxy_url", STRING, ""), Arg("no_proxy", STRING, ""), Arg("proxy_from_environment", BOOL, False),
                Arg("proxy_connect_header", MapOf(ListOf(SECRET)), {})]

HTTP_CLIENT: list = [
    Arg("bearer_token", SECRET, Secret()), Arg("bearer_token_file", STRING, ""),
    BlockArg("basic_auth", Schema([Arg("username", STRING, ""), Arg("password", SECRET, Secret()),
                                   Arg("password_file", STRING, "")],
                                  validate=_one_of("basic_auth", "password", "password_file"))),
    BlockArg("authorization", Schema([Arg("type", STRING, "Bearer"), Arg("credentials", SECRET, Secret()),
                                      Arg("credentials_file", STRING, "")],
                                     validate=_one_of("authorization", "credentials", "credentials_file"))),
    BlockArg("oauth2", Schema([Arg("client_id", STRING, ""), Arg("client_secret", SECRET, Secret()),
                               Arg("client_secret_file", STRING, ""), Arg("scopes", ListOf(STRING), []),
                               Arg("token_url", STRING, ""), Arg("endpoint_params", MapOf(STRING), {}),
                               *_PROXY_ITEMS, BlockArg("tls_config", TLS_CONFIG)], validate=_validate_oauth2)),
    BlockArg("tls_config", TLS_CONFIG),
    Arg("http_headers", MapOf(ListOf(SECRET)), {}),
    *_PROXY_ITEMS,
    Arg("follow_redirects", BOOL, True),
    # As Go: true offers HTTP/2 in the TLS handshake (ALPN) and speaks it where the server picks
    # it; false (and plain http://) speaks HTTP/1.1.
    Arg("enable_http2", BOOL, True),
]


def _auth_methods(a: dict) -> list[str]:
    used = []
    if a["bearer_token"] or a["bearer_token_file"]:
        used.append("bearer_token" if a["bearer_token"] else "bearer_token_file")
    if a["basic_auth"]["username"] or a["basic_auth"]["password"] or a["basic_auth"]["password_file"]:
        used.append("basic_auth")
    if a["authorization"]["credentials"] or a["authorization"]["credentials_file"]:
        used.append("authorization")
    if a["oauth2"]["client_id"] or a["oauth2"]["token_url"]:
        used.append("oauth2")
    return used


def validate_http_client(a: dict) -> None:
    """Alloy's rules across the blocks (each block validates itself)."""
    if a["bearer_token"] and a["bearer_token_file"]:
        raise ValueError("at most one of bearer_token and bearer_token_file must be set")
    used = _auth_methods(a)
    if len(used) > 1:
        raise ValueError(f"at most one authentication method may be set, got {' and '.join(used)}")
    if a["proxy_from_environment"] and (a["proxy_url"] or a["no_proxy"]):
        raise ValueError("proxy_from_environment cannot be combined with proxy_url or no_proxy")
    if a["no_proxy"] and not a["proxy_url"]:
        raise ValueError("no_proxy needs proxy_url")
    if a["proxy_connect_header"] and not (a["proxy_url"] or a["proxy_from_environment"]):
        raise ValueError("proxy_connect_header needs proxy_url or proxy_from_environment")
    if a["tls_config"]["server_name"] and (a["proxy_url"] or a["proxy_from_environment"]):
        # httpx names a CONNECT tunnel's TLS after the target host: refused, never ignored
        raise ValueError("tls_config.server_name: not supported through a proxy yet (the TLS name through a "
                         "CONNECT tunnel is the target's host name); use one or the other")
    if a["proxy_url"]:
        u = urllib.parse.urlsplit(a["proxy_url"])
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"proxy_url {a['proxy_url']!r}: expected http(s)://host:port")


# -- the settings resolved for a request --------------------------------------------------------------
def _read_file(path: str, what: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:   # the path is shown, never the content
        raise HTTPError(f"cannot read {what} file {path}: {e.strerror}") from None


def tls_context(t: dict, insecure_default: bool = False) -> ssl.SSLContext:
    """An ssl context from a decoded tls_config block (Go's defaults: verify, TLS 1.2+)."""
    ctx = ssl.create_default_context()
    ctx.minimum_version = _TLS_VERSIONS.get(t["min_version"], ssl.TLSVersion.TLSv1_2)
    try:
        if t["ca_file"]:
            ctx.load_verify_locations(cafile=t["ca_file"])
        if t["ca_pem"]:
            ctx.load_verify_locations(cadata=t["ca_pem"])
        if t["cert_file"] or t["cert_pem"]:
            _load_client_cert(ctx, t)
    except (OSError, ssl.SSLError) as e:
        raise HTTPError(f"tls_config: cannot load the certificates: {getattr(e, 'strerror', None) or e}") from None
    if t["insecure_skip_verify"] or insecure_default:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _load_client_cert(ctx: ssl.SSLContext, t: dict) -> None:
    """ssl loads a client certificate only from files: inline PEMs go to a private temporary
    directory that is removed as soon as they are loaded."""
    if not (t["cert_pem"] or t["key_pem"]):
        ctx.load_cert_chain(t["cert_file"], t["key_file"] or None)
        return
    with tempfile.TemporaryDirectory(prefix="hotstack-tls-") as d:
        cert, key = t["cert_file"], t["key_file"]
        if t["cert_pem"]:
            cert = os.path.join(d, "cert.pem")
            with open(os.open(cert, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(t["cert_pem"])
        if t["key_pem"]:
            key = os.path.join(d, "key.pem")
            with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(reveal(t["key_pem"]))
        ctx.load_cert_chain(cert, key)


@dataclass
class HTTPClientConfig:
    """Decoded HTTP client settings (the items of HTTP_CLIENT, or a dict with a subset)."""
    args: dict
    _oauth_token: tuple[str, float] = ("", 0.0)   # (token, monotonic expiry)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _transports: dict = field(default_factory=dict)   # (scheme, host or socket, timeout, follow) -> (Transport, tls_files())
    _transport_lock: threading.Lock = field(default_factory=threading.Lock)
    _oauth_client: "HTTPClientConfig | None" = None

    def get(self, name: str, default=None):
        return self.args.get(name, default)

    def headers(self) -> dict[str, str]:
        """http_headers and the Authorization header, credentials read now."""
        out = {k: ", ".join(reveal(v) for v in values) for k, values in (self.get("http_headers") or {}).items()}
        auth = self.authorization()
        if auth:
            out["Authorization"] = auth
        return out

    def authorization(self) -> str:
        a = self.args
        if a.get("bearer_token") or a.get("bearer_token_file"):
            token = reveal(a["bearer_token"]) or _read_file(a["bearer_token_file"], "bearer_token")
            return f"Bearer {token}"
        basic = a.get("basic_auth") or {}
        if basic.get("username") or basic.get("password") or basic.get("password_file"):
            password = reveal(basic["password"]) or (
                _read_file(basic["password_file"], "basic_auth password") if basic["password_file"] else "")
            return "Basic " + base64.b64encode(f"{basic['username']}:{password}".encode()).decode()
        authz = a.get("authorization") or {}
        if authz.get("credentials") or authz.get("credentials_file"):
            creds = reveal(authz["credentials"]) or _read_file(authz["credentials_file"], "authorization credentials")
            return f"{authz['type'] or 'Bearer'} {creds}"
        oauth = a.get("oauth2") or {}
        if oauth.get("token_url"):
            return f"Bearer {self._oauth2_token(oauth)}"
        return ""

    def _oauth2_token(self, o: dict) -> str:
        """The client-credentials grant (what Alloy's oauth2 block does), cached until expiry."""
        with self._lock:
            token, expiry = self._oauth_token
            if token and time.monotonic() < expiry:
                return token
            secret = reveal(o["client_secret"]) or (
                _read_file(o["client_secret_file"], "oauth2 client_secret") if o["client_secret_file"] else "")
            form = {"grant_type": "client_credentials", **o["endpoint_params"]}
            if o["scopes"]:
                form["scope"] = " ".join(o["scopes"])
            basic = base64.b64encode(f"{urllib.parse.quote(o['client_id'])}:{urllib.parse.quote(secret)}".encode())
            headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json",
                       "Authorization": "Basic " + basic.decode()}
            if self._oauth_client is None:   # the token endpoint's own client: the oauth2 block's proxy and TLS
                self._oauth_client = HTTPClientConfig({k: o[k] for k in (
                    "proxy_url", "no_proxy", "proxy_from_environment", "proxy_connect_header", "tls_config")})
            oauth_client = self._oauth_client
            status, body = request(o["token_url"], "POST", headers, urllib.parse.urlencode(form).encode(),
                                   oauth_client, follow=False)
            if status != 200:
                raise HTTPError(f"oauth2: token request to {o['token_url']}: HTTP {status}")
            try:
                answer = json.loads(body)
                token = answer["access_token"]
            except (ValueError, KeyError, TypeError):
                raise HTTPError(f"oauth2: token request to {o['token_url']}: no access_token in the answer") from None
            lifetime = float(answer.get("expires_in") or 3600)
            self._oauth_token = (token, time.monotonic() + max(lifetime - 10, 1))
            return token

    def ssl_context(self) -> ssl.SSLContext:
        return tls_context(self.get("tls_config") or TLS_CONFIG.defaults())

    def server_name(self) -> str:
        return (self.get("tls_config") or {}).get("server_name", "")

    def tls_files(self) -> tuple:
        """The TLS files as they are now (path, size, mtime): a transport made before they changed
        (a rotated client certificate or CA) is made again, as Go's clients read them again."""
        t = self.get("tls_config") or {}
        out = []
        for path in (t.get("ca_file"), t.get("cert_file"), t.get("key_file")):
            if path:
                try:
                    st = os.stat(path)
                    out.append((path, st.st_size, st.st_mtime_ns))
                except OSError:
                    out.append((path, None, None))
        return tuple(out)

    @property
    def follow_redirects(self) -> bool:
        return self.get("follow_redirects", True)


# -- the transport ------------------------------------------------------------------------------
def _no_proxy_mounts(no_proxy: str) -> dict[str, None] | None:
    """httpx mount patterns that go direct for a no_proxy list (None: every host goes direct)."""
    mounts: dict[str, None] = {}
    for entry in filter(None, (e.strip() for e in no_proxy.split(","))):
        if entry == "*":
            return None
        host = entry.lstrip(".")
        mounts[f"all://{host}"] = None
        mounts[f"all://*.{host}"] = None
    return mounts


def proxy_mounts(client: HTTPClientConfig) -> dict[str, httpx.Proxy | None]:
    """The proxy settings as httpx mounts: the proxy for every URL (or per scheme from the
    environment), direct for the no_proxy hosts; CONNECT headers and URL credentials with it."""
    if client.get("proxy_from_environment"):
        env = urllib.request.getproxies_environment()
        proxies = {f"{scheme}://": env[scheme] for scheme in ("http", "https") if env.get(scheme)}
        no_proxy = env.get("no", "")
    elif client.get("proxy_url"):
        proxies, no_proxy = {"all://": client.get("proxy_url")}, client.get("no_proxy", "")
    else:
        return {}
    direct = _no_proxy_mounts(no_proxy)
    if direct is None:
        return {}
    connect = {k: ", ".join(reveal(v) for v in vs) for k, vs in (client.get("proxy_connect_header") or {}).items()}
    return {**{pattern: httpx.Proxy(url, headers=connect) for pattern, url in proxies.items()}, **direct}


def new_transport(url: str, timeout: float, client: HTTPClientConfig, follow: bool = True) -> Transport:
    """A transport with the client's settings for requests under this base URL: http://,
    https:// and unix:// (a socket path; requests go to http://localhost on it)."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https", "unix"):
        raise HTTPError(f"unsupported URL scheme {u.scheme!r} in {redact_url(url)!r} (use unix://, http:// or https://)")
    # the system's roots (httpx's default would be certifi's), tls_config's for https
    verify = client.ssl_context() if u.scheme == "https" else ssl.create_default_context()
    return Transport(timeout=timeout, verify=verify, http2=client.get("enable_http2", True),
                     proxies=proxy_mounts(client), uds=u.path if u.scheme == "unix" else "",
                     follow_redirects=follow and client.follow_redirects)


def transport_for(url: str, timeout: float, client: HTTPClientConfig | None = None,
                  follow: bool = True) -> tuple[Transport, str]:
    """(the client's transport for this base URL, kept for its next requests; the URL requests
    are made under)."""
    client = client or HTTPClientConfig({})
    u = urllib.parse.urlsplit(url)
    key = (u.scheme, u.path if u.scheme == "unix" else u.netloc, timeout, follow)
    files = client.tls_files() if u.scheme == "https" else ()
    with client._transport_lock:
        transport, made_with = client._transports.get(key, (None, ()))
        if transport is not None and made_with != files:
            transport.close()
            transport = None
        if transport is None:
            transport = new_transport(url, timeout, client, follow)
            client._transports[key] = (transport, files)
    return transport, "http://localhost" if u.scheme == "unix" else url.rstrip("/")


def request(url: str, method: str, headers: dict[str, str], body: bytes | None = None,
            client: HTTPClientConfig | None = None, path: str = "", timeout: float = 10.0,
            follow: bool = True) -> tuple[int, bytes]:
    """One request, following redirects when the client allows it (as Go: the Authorization
    header stays with its host)."""
    client = client or HTTPClientConfig({})
    transport, base = transport_for(url, timeout, client, follow)
    try:
        resp, data = transport.request(method, base + path, headers, body, sni_hostname=client.server_name(),
                                       max_body=MAX_BODY)
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        raise HTTPError(f"cannot reach {redact_url(url)}: {describe(e)}") from None
    if len(data) > MAX_BODY:
        raise HTTPError(f"{method} {path or '/'} on {redact_url(url)}: the answer is larger than {MAX_BODY >> 20} MiB")
    if resp.is_redirect and follow and not client.follow_redirects:
        raise HTTPError(f"{method} {path or '/'} on {redact_url(url)}: HTTP {resp.status_code} redirect to "
                        f"{redact_url(resp.headers.get('Location', ''))} (follow_redirects is false)")
    return resp.status_code, data


def get_json(url: str, path: str, headers: dict[str, str] | None = None, timeout: float = 10.0,
             client: HTTPClientConfig | None = None) -> object:
    all_headers = {**(client.headers() if client else {}), **(headers or {})}
    status, body = request(url, "GET", all_headers, None, client, path, timeout)
    if status != 200:
        raise HTTPError(f"GET {path} on {redact_url(url)}: HTTP {status}: {body[:200].decode(errors='replace').strip()}")
    try:
        return json.loads(body)
    except ValueError:
        raise HTTPError(f"GET {path} on {redact_url(url)}: the response is not JSON") from None
