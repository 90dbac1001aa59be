"""OAuth 2.1 for `toolsrv mcp --http`: the face as a resource server (issue 48.3).

Rule.  With `--oauth-issuer ISSUER --oauth-jwks FILE|URL` a request passes the gate only
with `Authorization: Bearer <a JWT access token>` that this module accepts; the static
bearer token (http.py) is then not used.  Nothing here is our own cryptography: PyJWT
checks the signature.

Theory of operation.
  keys       the issuer's JWKS, from a file or a URL (https, or http to a loopback host
             alone; no redirects followed), read when the face starts (a failure stops
             it), then again when a token names a key id not in it (at most once per
             KEYS_RETRY seconds) or the copy is KEYS_TTL old (a failure keeps it).  A fetch runs in a thread,
             never on the loop, reads KEYS_MAX bytes at most, and keeps KEYS_COUNT keys.
             Only public keys of asymmetric algorithms are kept: a symmetric (`oct`) key
             in the set is refused at load, so a token can never be checked as HMAC with
             a public key as its secret.
  a token    its header's `alg` must be one of ALGORITHMS (never `none`, never HS*), and
             the key it names (`kid`; without one, the set's only key of that family)
             must verify its signature; `iss` must be the issuer exactly (RFC 9207),
             `aud` name this face (--oauth-audience, default its own URL), `exp` be in
             the future (LEEWAY seconds of clock skew), and `sub` be there: the
             principal.  Scopes are the `scope` claim (space-separated) or `scp` (a
             list).
  refusals   401 with `WWW-Authenticate: Bearer resource_metadata="<metadata URL>"`,
             and `error="invalid_token"` with the reason when a token was sent; a token
             without the scope a request needs is 403 `error="insufficient_scope"`
             naming the scope (RFC 6750 3.1).
  metadata   RFC 9728 protected-resource metadata, served without a token at
             /.well-known/oauth-protected-resource and at that path followed by the
             resource's own path (/mcp): what a client reads to find the issuer.
  scopes     `tools:list` lists (tools/list, prompts), showing the tools the principal
             may call; `tools:call` calls any tool, `tools:call:NAME` the tool NAME
             (call_tool in --search mode: the tool it names).  Any other method needs a
             valid token only.  SCOPES names them.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

from .httpconns import is_loopback

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
              "ES512", "EdDSA")
LEEWAY = 30.0             # seconds of clock skew allowed on exp, nbf and iat
KEYS_MAX = 256 * 1024     # bytes of a JWKS
KEYS_COUNT = 64           # keys kept of one set
KEYS_TTL = 600.0          # seconds a fetched set is used before it is fetched again
KEYS_RETRY = 30.0         # seconds between fetches for a key id the set does not have
FETCH_TIMEOUT = 10.0
LIST, CALL = "tools:list", "tools:call"
SCOPES = (LIST, CALL, f"{CALL}:NAME")
WELL_KNOWN = "/.well-known/oauth-protected-resource"
log = logging.getLogger("toolsrv.mcp")


class BadOAuth(ValueError):
    """The OAuth options or the issuer's keys cannot be used; str(e) says why."""


class Principal:
    """Whom a token speaks for: its subject, client and scopes."""

    def __init__(self, sub: str, client: str, scopes: frozenset[str], issuer: str) -> None:
        self.sub, self.client, self.scopes, self.issuer = sub, client, scopes, issuer

    def may_list(self) -> bool:
        return LIST in self.scopes

    def may_call(self, name: str) -> bool:
        return CALL in self.scopes or f"{CALL}:{name}" in self.scopes


class Stale(Exception):
    """The key set is due to be read again before a token can be checked."""


class Refused(Exception):
    """A request the gate answers itself: (status, why, the WWW-Authenticate value)."""

    def __init__(self, status: int, why: str, challenge: str) -> None:
        super().__init__(why)
        self.status, self.why, self.challenge = status, why, challenge


def _quoted(s: str) -> str:
    """`s` as an RFC 9110 quoted-string's content (no quote or backslash, printable)."""
    return "".join(c if c.isprintable() and c not in '"\\' else "'" for c in s)[:300]


class Keys:
    """The issuer's public keys (the module's comment: keys)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.url = source if "://" in source else None
        if self.url is not None:
            _check_url(self.url)
        self.keys: list[Any] = []
        self.made: dict[tuple[int, str], Any] = {}      # (key's index, alg) -> PyJWK
        self.read_at = 0.0                  # when the set in hand was read
        self.tried = float("-inf")          # when it was last read again (refresh)
        self.lock = threading.Lock()

    def load(self) -> None:
        """Read the set now; BadOAuth saying why it cannot be used."""
        try:
            raw = _fetch(self.url) if self.url else _read(self.source)
            keys = _parse(json.loads(raw))
        except (OSError, ValueError) as e:
            raise BadOAuth(f"--oauth-jwks {self.source}: {getattr(e, 'strerror', None) or e}"
                           ) from None
        self.keys, self.made, self.read_at = keys, {}, time.monotonic()

    def find(self, kid: str | None, alg: str) -> Any:
        """The key that checks a token of `kid` and `alg`; Stale when the set is to be read
        again first (refresh, off the loop), Refused when no key fits."""
        key = self._pick(kid, alg)
        now = time.monotonic()
        if now - self.read_at > KEYS_TTL or (key is None and now - self.tried > KEYS_RETRY):
            raise Stale
        if key is None:
            raise Refused(401, f"no key of the issuer's set checks this token (kid "
                          f"{kid!r}, alg {alg})", "")
        return key

    def refresh(self) -> None:
        """Read the set again (blocking: a thread's work), unless another thread just
        did; a failure keeps the old set, tried again KEYS_RETRY later."""
        with self.lock:
            now = time.monotonic()
            if now - self.tried <= KEYS_RETRY and now - self.read_at <= KEYS_TTL:
                return
            self.tried = now
            try:
                self.load()
            except BadOAuth as e:
                log.warning("%s (the keys read before are kept)", e)
                self.read_at = now - KEYS_TTL + KEYS_RETRY

    def _pick(self, kid: str | None, alg: str) -> Any:
        from jwt import PyJWK
        fits = []
        for i, k in enumerate(self.keys):
            if kid is not None and k.get("kid") != kid or k.get("alg") not in (None, alg):
                continue
            if (i, alg) not in self.made:
                try:
                    self.made[i, alg] = PyJWK(k, algorithm=alg)
                except Exception:
                    self.made[i, alg] = None        # a key of another family than alg
            if self.made[i, alg] is not None:
                fits.append(self.made[i, alg])
        return fits[0] if len(fits) == 1 or (kid is not None and fits) else None


def _check_url(url: str) -> None:
    p = urllib.parse.urlsplit(url)
    if p.scheme == "https":
        return
    if p.scheme == "http" and is_loopback(p.hostname or ""):
        return
    raise BadOAuth(f"--oauth-jwks {url}: the URL must be https, or http to a loopback "
                   "address")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a: Any, **k: Any) -> None:
        raise OSError("the JWKS URL redirects: give the address it moved to")


def _fetch(url: str) -> bytes:
    host = urllib.parse.urlsplit(url).hostname or ""
    proxies = urllib.request.ProxyHandler({}) if is_loopback(host) else \
        urllib.request.ProxyHandler()
    opener = urllib.request.build_opener(proxies, _NoRedirect)
    with opener.open(url, timeout=FETCH_TIMEOUT) as r:
        raw = r.read(KEYS_MAX + 1)
    if len(raw) > KEYS_MAX:
        raise ValueError(f"the key set is over {KEYS_MAX} bytes")
    return raw


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        raw = f.read(KEYS_MAX + 1)
    if len(raw) > KEYS_MAX:
        raise ValueError(f"the key set is over {KEYS_MAX} bytes")
    return raw


def _parse(doc: Any) -> list[dict[str, Any]]:
    """The public keys of a JWKS document; ValueError for a set that cannot be used."""
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(keys, list) or not keys:
        raise ValueError('not a JWKS: want {"keys": [...]} with at least one key')
    out = []
    for k in keys[:KEYS_COUNT]:
        if not isinstance(k, dict):
            raise ValueError("a key of the set is not a JSON object")
        if k.get("kty") == "oct":
            raise ValueError("the set has a symmetric (oct) key: only public keys "
                             "(RSA, EC, OKP) may check tokens")
        if "d" in k:
            raise ValueError(f"the key {k.get('kid')!r} is a private key: give the "
                             "issuer's public keys")
        if k.get("use", "sig") == "sig" and k.get("kty") in ("RSA", "EC", "OKP"):
            out.append(k)
    if not out:
        raise ValueError("the set has no signing key (RSA, EC or OKP, use sig)")
    return out


class OAuth:
    """The resource server's checks (the module's comment)."""

    def __init__(self, issuer: str, jwks: str, audience: str) -> None:
        if not issuer:
            raise BadOAuth("--oauth-issuer: give the issuer's identifier (its URL)")
        self.issuer, self.audience = issuer, audience
        self.keys = Keys(jwks)
        p = urllib.parse.urlsplit(audience)
        base = f"{p.scheme}://{p.netloc}" if p.scheme in ("http", "https") else ""
        self.paths = {WELL_KNOWN, WELL_KNOWN + (p.path.rstrip("/") if base else "")}
        self.metadata_url = base + WELL_KNOWN + (p.path.rstrip("/") if base else "")

    def metadata(self) -> bytes:
        """The RFC 9728 document."""
        return json.dumps({
            "resource": self.audience, "authorization_servers": [self.issuer],
            "scopes_supported": list(SCOPES), "bearer_methods_supported": ["header"],
            "resource_name": "toolsrv"}).encode()

    def challenge(self, error: str = "", why: str = "", scope: str = "") -> str:
        parts = [f'{k}="{_quoted(v)}"' for k, v in (
            ("error", error), ("error_description", why), ("scope", scope)) if v]
        parts.append(f'resource_metadata="{self.metadata_url}"')
        return "Bearer " + ", ".join(parts)

    def principal(self, authorization: bytes) -> Principal:
        """The principal of a request's Authorization header, or Refused (401); Stale
        when the keys are to be read again first (Keys.refresh)."""
        if not authorization:
            raise Refused(401, "unauthorized: this toolsrv mcp wants `Authorization: Bearer "
                          f"<an access token of {self.issuer}>`", self.challenge())
        scheme, _, token = authorization.decode("latin-1").partition(" ")
        try:
            if scheme.lower() != "bearer" or not token.strip():
                raise Refused(401, "not a bearer token", "invalid_token")
            return self._check(token.strip())
        except Refused as e:
            why = f"invalid token: {e.why}"
            raise Refused(401, why, self.challenge("invalid_token", why)) from None

    def _check(self, token: str) -> Principal:
        import jwt
        try:
            head = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise Refused(401, f"not a JWT ({e})", "") from None
        alg = head.get("alg")
        if alg not in ALGORITHMS:
            raise Refused(401, f"alg {str(alg)[:20]!r} is not allowed (only "
                          f"{', '.join(ALGORITHMS)})", "")
        key = self.keys.find(head.get("kid") if isinstance(head.get("kid"), str) else None,
                             alg)
        try:
            claims = jwt.decode(token, key, algorithms=[alg], audience=self.audience,
                                issuer=self.issuer, leeway=LEEWAY,
                                options={"require": ["exp", "iss", "aud", "sub"]})
        except jwt.ExpiredSignatureError:
            raise Refused(401, "the token has expired", "") from None
        except jwt.InvalidAudienceError:
            raise Refused(401, f"the token is not for this server (its aud is not "
                          f"{self.audience})", "") from None
        except jwt.InvalidIssuerError:
            raise Refused(401, f"the token was not issued by {self.issuer}", "") from None
        except jwt.PyJWTError as e:
            raise Refused(401, str(e), "") from None
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise Refused(401, "the token has no subject (sub)", "")
        return Principal(sub, str(claims.get("client_id") or claims.get("azp") or sub),
                         _scopes(claims), self.issuer)

    def forbidden(self, who: Principal, body: bytes, search: bool) -> Refused | None:
        """403 when a JSON-RPC message of the body needs a scope `who` lacks."""
        try:
            doc = json.loads(body) if body else None
        except ValueError:
            return None             # not JSON: the SDK answers it
        for msg in doc if isinstance(doc, list) else [doc]:
            need = _needs(msg, search) if isinstance(msg, dict) else None
            if need is not None and not (who.may_list() if need == LIST else
                                         who.may_call(need[len(CALL) + 1:])):
                why = f"forbidden: {who.sub} lacks the scope {need}"
                return Refused(403, why, self.challenge("insufficient_scope", why, need))
        return None


def _needs(msg: dict[str, Any], search: bool) -> str | None:
    """The scope a JSON-RPC message needs, or None (a valid token is enough)."""
    method = msg.get("method")
    params = p if isinstance(p := msg.get("params"), dict) else {}
    if method in ("tools/list", "prompts/list", "prompts/get"):
        return LIST
    if method != "tools/call":
        return None
    name = params.get("name")
    if search and name == "search_tools":
        return LIST
    if search and name == "call_tool":
        args = params.get("arguments")
        name = args.get("name") if isinstance(args, dict) else None
    return f"{CALL}:{name if isinstance(name, str) else ''}"


def _scopes(claims: dict[str, Any]) -> frozenset[str]:
    s = claims.get("scope")
    if isinstance(s, str):
        return frozenset(s.split())
    scp = claims.get("scp")
    if isinstance(scp, list):
        return frozenset(x for x in scp if isinstance(x, str))
    if isinstance(scp, str):
        return frozenset(scp.split())
    return frozenset()
