"""Secrets (``acquisition.secrets``): every form a token or password can take, and every place
text leaves nrg (log, exception, sink status, report error, HTTP error text and header), after
redaction and after cutting to length.

A secret is checked absent by its pieces: no 6-character piece of it may appear anywhere, so a
secret cut in half at a length limit is caught as well as a whole one.
"""

from __future__ import annotations

import http.server
import json
import logging
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acquisition.api import PluginContext
from acquisition.errors import ConfigError, NrgError
from acquisition.report.influx import InfluxQLStore
from acquisition.report.influx_target import target_from_url
from acquisition.secrets import REDACTED, Redactor, basic_auth, read_secret, v1_credentials
from sinks.influxdb.http import MAX_MESSAGE, server_message
from tests.influxdb.helpers import make_points, make_sink, until
from tests.influxdb.scripted import Answer, Request, ScriptedServer

TOKEN = "Zq8xR2mW4vT6yB1nK3pL5sD7fG9hJ0cV"  # 32 characters, as an API token
# RFC 7617's example: base64("Aladdin:open sesame") is QWxhZGRpbjpvcGVuIHNlc2FtZQ==
USER, PASSWORD, BASIC = "Aladdin", "open sesame", "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="


def pieces(secret: str, n: int = 6) -> list[str]:
    """Every ``n``-character piece of ``secret`` (the whole secret when it is shorter)."""
    return [secret[i : i + n] for i in range(max(len(secret) - n + 1, 1))]


def assert_absent(text: str, *secrets: str) -> None:
    for secret in secrets:
        for piece in pieces(secret):
            assert piece not in text, f"{piece!r} of a secret in {text!r}"


# --- the forms -----------------------------------------------------------------------------------


def test_a_token_is_replaced_wherever_it_appears() -> None:
    """Guards: every occurrence of the token is replaced, in a Token header as anywhere."""
    r = Redactor(TOKEN)
    text = f"Authorization: Token {TOKEN}\nand again: {TOKEN}."
    assert r.redact(text) == f"Authorization: Token {REDACTED}\nand again: {REDACTED}."


def test_basic_auth_is_the_rfc_7617_encoding() -> None:
    """Guards: ``basic_auth`` encodes ``user:password`` in that order (RFC 7617's example)."""
    assert basic_auth(USER, PASSWORD) == BASIC


def test_an_echoed_basic_header_is_redacted() -> None:
    """Guards: the Redactor knows the base64 form of ``user:password`` with the user first
    (an echoed ``Authorization: Basic`` header shows it), and the password alone."""
    r = Redactor(username=USER, password=PASSWORD)
    assert r.redact(f"Authorization: Basic {BASIC}") == f"Authorization: Basic {REDACTED}"
    assert r.redact(f"password was {PASSWORD}") == f"password was {REDACTED}"
    assert r.redact(f"user {USER}") == f"user {USER}"  # a user name is not a secret
    # a password without a user: the header carries base64(":open sesame") = Om9wZW4gc2VzYW1l
    alone = Redactor(password=PASSWORD)
    assert alone.redact("Basic Om9wZW4gc2VzYW1l") == f"Basic {REDACTED}"


def test_a_user_password_token_and_its_password_half() -> None:
    """Guards: an InfluxDB 1.8 ``user:password`` token is redacted whole, and its password half
    when it appears alone (a server may echo ``p=`` or the password only); the whole token
    gives one marker, not ``user:<token>``."""
    token = "grafana:hunter2-long"
    r = Redactor(token)
    assert r.redact(f"token {token}") == f"token {REDACTED}"
    assert r.redact("p=hunter2-long&db=nrg") == f"p={REDACTED}&db=nrg"


def test_v1_credentials_split_a_user_password_token() -> None:
    """Guards: a ``user:password`` token gives the v1 API's user and password (split at the
    first colon); given ones win; a plain token gives none."""
    assert v1_credentials("grafana:pa:ss", "", "") == ("grafana", "pa:ss")
    assert v1_credentials("grafana:pass", "u", "p") == ("u", "p")
    assert v1_credentials(TOKEN, "", "") == ("", "")
    # a password given alone keeps the token whole (no user taken from it)
    assert v1_credentials("grafana:pass", "", "given") == ("", "given")


def test_short_secrets_are_redacted_too() -> None:
    """Guards: a password of 3 to 7 characters is still redacted (only 1 or 2 characters are
    left alone: they would blank out ordinary letters), as a token, a password or either half
    of a ``user:password`` token."""
    for secret in ("abc", "s3cr", "pa55w", "hunter7"):
        r = Redactor(password=secret)
        assert r.redact(f"[{secret}]") == f"[{REDACTED}]", secret
    assert Redactor("ene").redact("the energy") == f"the {REDACTED}rgy"
    for short in ("e", "en"):
        assert Redactor(password=short).redact("the energy") == "the energy", short
        assert Redactor(short).redact("the energy") == "the energy", short
        assert Redactor(f"user:{short}").redact("the energy") == "the energy", short


# Secrets drawn from letters that "<token>" does not contain, so a replacement can never
# spell one again; the text around them from characters no secret or base64 form contains, so
# each form stands apart.
SECRET_CHARS = "ABCDFGHIJLMPQRSUVWXYZ0123456789!#%&*-_"
secret_text = st.text(SECRET_CHARS, min_size=0, max_size=12)
tokens = st.one_of(secret_text, st.tuples(secret_text, secret_text).map(":".join))


@settings(max_examples=150)
@given(
    token=tokens,
    username=secret_text,
    password=secret_text,
    filler=st.lists(st.text(" ,.;", min_size=1, max_size=3), min_size=4, max_size=4),
    order=st.permutations(range(4)),
)
def test_every_form_of_any_secret_is_replaced_whole(
    token: str, username: str, password: str, filler: list[str], order: list[int]
) -> None:
    """Guards, for any token, user and password: each form of at least 3 characters (the
    token, the password, the password half of a ``user:password`` token, the Basic header of
    user and password) is replaced whole by the marker wherever it stands, in any order, none
    cut into a redacted half and a visible rest (a ``user:`` left before a redacted password);
    the text around them is kept as it was."""
    forms = [token, password, token.partition(":")[2] if ":" in token else ""]
    if username or password:
        forms.append(basic_auth(username, password))
    forms = [f for f in forms if len(f) >= 3]
    r = Redactor(token, username=username, password=password)
    text = "".join(filler[i] + (forms[i] if i < len(forms) else "") for i in order)
    want = "".join(filler[i] + (REDACTED if i < len(forms) else "") for i in order)
    assert r.redact(text) == want
    assert r.redact("".join(filler)) == "".join(filler)


def test_read_secret_from_a_file_and_errors_that_never_show_it(tmp_path: Path) -> None:
    """Guards: a ``*_file`` key reads the stripped file; both set, or an unreadable file, give a
    one-line error naming the setting and not the secret."""
    f = tmp_path / "token"
    f.write_text(f"  {TOKEN}\n")
    assert read_secret("", str(f), "token", "[[sinks.influxdb]]") == TOKEN
    assert read_secret(TOKEN, "", "token", "[[sinks.influxdb]]") == TOKEN
    with pytest.raises(ConfigError) as both:
        read_secret(TOKEN, str(f), "token", "[[sinks.influxdb]]")
    assert str(both.value) == "[[sinks.influxdb]]: set token or token_file, not both"
    with pytest.raises(ConfigError) as missing:
        read_secret("", str(tmp_path / "absent"), "token", "[[sinks.influxdb]]")
    assert "token_file: cannot read" in str(missing.value)
    assert_absent(str(both.value) + str(missing.value), TOKEN)


# --- after cutting: the server's words --------------------------------------------------------


@pytest.mark.parametrize("where", ["header", "body", "json", "reason"])
def test_a_message_is_redacted_before_it_is_cut(where: str) -> None:
    """Guards: a server's message (the ``X-Influxdb-Error`` header, a plain body, a JSON body's
    ``message``, the HTTP reason) is redacted before it is cut to MAX_MESSAGE (1,000) characters: a token that
    straddles the cut leaves no half behind."""
    r = Redactor(TOKEN)
    said = "x" * (1000 - 10) + TOKEN + " tail"  # the token starts at character 990
    headers = {"X-Influxdb-Error": said} if where == "header" else {}
    body = {"body": said.encode(), "json": json.dumps({"message": said}).encode()}
    reason = said if where == "reason" else "Unauthorized"  # no header, no body: the reason
    message = server_message(headers, body.get(where, b""), reason, r.redact)
    assert_absent(message, TOKEN)
    assert REDACTED in message
    assert len(message) <= 1000


@pytest.mark.parametrize("where", ["header", "body", "json", "reason"])
def test_a_message_of_1000_characters_is_kept_whole_and_a_longer_one_cut_to_1000(
    where: str,
) -> None:
    """Guards: the server's words are kept whole up to 1,000 characters, that length included;
    1,001 become their first 999 and "…" (1,000 in all), from each place they are read."""

    def said(n: int) -> str:
        headers = {"X-Influxdb-Error": "e" * n} if where == "header" else {}
        body = {"body": ("e" * n).encode(), "json": json.dumps({"message": "e" * n}).encode()}
        reason = "e" * n if where == "reason" else "Unauthorized"
        return server_message(headers, body.get(where, b""), reason, Redactor(TOKEN).redact)

    assert said(999) == "e" * 999
    assert said(1000) == "e" * 1000
    assert said(1001) == "e" * 999 + "…"
    assert said(5000) == "e" * 999 + "…"


@pytest.mark.parametrize(
    "said",
    [
        '{"code": "refused", "auth": "Token %s"}',  # an object without "message" or "error"
        '{"message": "", "error": null, "auth": "Token %s"}',  # both empty
        '["refused", "Token %s"]',  # JSON, not an object
    ],
)
def test_a_json_body_without_a_message_is_the_message_as_it_came(said: str) -> None:
    """Guards: a JSON body in which the sink finds no ``message`` or ``error`` words is the
    server's message itself, redacted and stripped of the spaces around it, never nothing."""
    body = f"  {said % TOKEN}\n".encode()
    message = server_message({}, body, "Bad Request", Redactor(TOKEN).redact)
    assert message == said % REDACTED


def test_a_secret_escaped_in_a_json_body_is_redacted_once_decoded() -> None:
    """Guards: a password with a quote or backslash comes back JSON-escaped in a body; the
    decoded ``message`` is redacted too."""
    password = 'pa"ss\\word'
    r = Redactor(password=password)
    body = b'{"message": "bad password pa\\"ss\\\\word"}'
    message = server_message({}, body, "Unauthorized", r.redact)
    assert_absent(message, password)
    assert message == f"bad password {REDACTED}"


# --- the sink: log, status, dead letters -----------------------------------------------------


def error_header(status: int) -> object:
    """Answer ``status`` with the request's Authorization header echoed in ``X-Influxdb-Error``,
    placed so that its token straddles the 1,000-character cut."""

    def script(req: Request) -> Answer:
        auth = req.headers.get("Authorization", "")
        pad = "h" * (MAX_MESSAGE - 8 - len("Authorization: Token "))
        return status, {"X-Influxdb-Error": f"{pad}Authorization: {auth}"}, b""

    return script


@pytest.mark.parametrize("status", [400, 401, 500])
async def test_an_error_header_never_shows_the_token(
    context: PluginContext, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    """Guards: the sink redacts the ``X-Influxdb-Error`` header before cutting it, in its log,
    its status line (the agent's summary of the sink) and its dead-letter file."""
    caplog.set_level(logging.DEBUG)
    with ScriptedServer(error_header(status)) as server:  # type: ignore[arg-type]
        sink = make_sink(context, server.url, token=TOKEN, drain_timeout=0.0)
        await sink.open()
        await sink.write(make_points(0, 4))
        await sink.flush()
        await until(lambda: len(server.writes) >= 1, "a write")
        status_text = sink.status()
        await sink.aclose()
    assert server.writes[0].headers["Authorization"] == f"Token {TOKEN}"
    dead = sink.dead_letter_path.read_text() if sink.dead_letter_path.exists() else ""
    everything = caplog.text + status_text + dead
    assert "Authorization: Token <tok" in everything  # the header's words were kept
    assert_absent(everything, TOKEN)


@pytest.fixture
def context(tmp_path: Path) -> PluginContext:
    return PluginContext(
        host="testhost",
        interval_s=0.1,
        state_dir=tmp_path / "state",
        data_dir=tmp_path / "data",
        runtime_dir=tmp_path / "run",
        tags={"host": "testhost", "run": "secrets"},
    )


# --- the report: exceptions from a server's answer -------------------------------------------


class _EchoQuery(http.server.BaseHTTPRequestHandler):
    """Answers every ``GET /query`` with 401 and the request (its query string, with the
    ``p=`` password, and its Authorization header) in the body, padded to straddle the
    report's 300-character cut."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        query = urllib.parse.unquote_plus(urllib.parse.urlsplit(self.path).query)
        auth = self.headers.get("Authorization", "")
        body = ("q" * 280 + f" {query} {auth}").encode()
        self.send_response(401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo_query_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EchoQuery)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize("creds", ["password", "token"])
def test_a_report_error_never_shows_the_credentials(echo_query_url: str, creds: str) -> None:
    """Guards: ``report --influx`` turns a server's 401 that echoes the password (``p=``) or the
    token (header) into a one-line error without them, redacted before its cut."""
    secret = "s3cret-Pass-word" if creds == "password" else TOKEN
    env = (
        {"NRG_INFLUX_USER": "nrg", "NRG_INFLUX_PASSWORD": secret}
        if creds == "password"
        else {"NRG_INFLUX_TOKEN": secret}
    )
    store = InfluxQLStore(target_from_url(f"{echo_query_url}/nrg", env))
    with pytest.raises(NrgError) as err:
        list(store.points(["rapl"], start_ns=0, end_ns=10))
    text = str(err.value)
    assert "answered 401" in text and "\n" not in text
    assert_absent(text, secret)
    assert_absent(repr(store.target), secret)  # nor the target's own description


def test_a_secret_file_under_home_and_a_json_error_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guards: ``token_file = "~/…"`` is read from the home directory; a JSON body's ``error``
    key is the server's message when it has no ``message``."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "nrg-token").write_text(TOKEN)
    assert read_secret("", "~/nrg-token", "token", "[[sinks.influxdb]]") == TOKEN
    message = server_message({}, b'{"error": "bad token"}', "Unauthorized", Redactor(TOKEN).redact)
    assert message == "bad token"
