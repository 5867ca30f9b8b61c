"""Input validation, secrets masking and private state files (issue #14)."""
from __future__ import annotations

import ipaddress
import json
import os
import stat
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envctl import validate as v
from envctl.errors import UsageError
from envctl.secrets import is_secret_key, mask_data, mask_secrets, mask_text

NAME_CHARS = string.ascii_letters + string.digits + "-_"


# -- names -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("good", ["default", "lab-a", "eval_1", "A", "x" * 40, "0day"])
def test_good_names(good):
    assert v.validate_lab_name(good) == good and v.validate_instance_name(good) == good


@pytest.mark.parametrize("bad", ["", "..", "../x", "a/b", "a\\b", "x" * 41, "-rf", "_x", "a b", "lab.json", "é", "a\n", "a\0b", "~root"])
def test_bad_names(bad):
    with pytest.raises(UsageError) as err:
        v.validate_lab_name(bad)
    assert "\n" not in str(err.value).split(";")[0] or bad.endswith("\n")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_accepted_name_is_a_plain_file_name(text):
    try:
        name = v.validate_name(text)
    except UsageError:
        return
    assert 1 <= len(name) <= v.NAME_MAX and set(name) <= set(NAME_CHARS)
    assert "/" not in name and ".." not in name and not name.startswith("-")
    assert os.path.basename(name) == name and os.path.normpath(name) == name


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=NAME_CHARS, min_size=1, max_size=40).filter(lambda s: s[0] not in "-_"))
def test_every_well_formed_name_is_accepted(name):
    assert v.validate_name(name) == name


# -- ports -----------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(-10**6, 10**6), st.text(max_size=8)))
def test_port_validator_accepts_exactly_1_to_65535(value):
    try:
        port = v.validate_port(value)
    except UsageError:
        ok = isinstance(value, int) and 1 <= value <= 65535 or isinstance(value, str) and value.strip().isdigit() \
            and value.strip().isascii() and len(value.strip()) <= 7 and 1 <= int(value.strip()) <= 65535
        assert not ok, value
        return
    assert 1 <= port <= 65535


@settings(max_examples=200, deadline=None)
@given(st.integers(-100, 70000), st.lists(st.integers(1, 65535), max_size=5))
def test_port_offset_keeps_every_port_valid(offset, ports):
    try:
        got = v.validate_port_offset(offset, ports)
    except UsageError:
        assert not (0 <= offset <= 60000) or any(p + offset > 65535 for p in ports)
        return
    assert got == offset and all(1 <= p + got <= 65535 for p in ports)


def test_port_offset_message_names_the_limit():
    with pytest.raises(UsageError, match="at most 55536"):
        v.validate_port_offset(60000, [7770, 9999])
    with pytest.raises(UsageError):
        v.validate_port(True)


# -- hosts -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("good", ["127.0.0.1", "0.0.0.0", "::", "::1", "10.0.0.5", "localhost", "lab.example.org",
                                  "ec2-3-14-1-2.us-east-2.compute.amazonaws.com", "host-1."])
def test_good_hosts(good):
    assert v.validate_host(good) == good


@pytest.mark.parametrize("bad", ["", "http://lab", "lab:8080", "lab/x", "'lab'", '"lab"', "la b", "lab\n", "300.1.2.3",
                                 "-lab", "lab..org", "[::1]", "a" * 64 + ".org", "$(reboot)", "lab;id"])
def test_bad_hosts(bad):
    with pytest.raises(UsageError):
        v.validate_host(bad)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_accepted_host_is_safe_in_urls_and_argv(text):
    try:
        host = v.validate_host(text)
    except UsageError:
        return
    assert not any(c in host for c in " \t\n\"'/\\@?#;$`&|<>()[]{}") and "://" not in host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        assert set(host) <= set(string.ascii_letters + string.digits + ".-")


def test_loopback_detection():
    assert v.is_loopback("127.0.0.1") and v.is_loopback("127.1.2.3") and v.is_loopback("::1") and v.is_loopback("localhost")
    assert not v.is_loopback("0.0.0.0") and not v.is_loopback("") and not v.is_loopback("::") and not v.is_loopback("10.0.0.1")


# -- durations -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,seconds", [("8h", 28800), ("30m", 1800), ("90s", 90), ("90", 90), ("2d", 172800), (" 1H ", 3600)])
def test_durations(text, seconds):
    assert v.validate_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "h", "-1h", "1.5h", "infh", "nanm", "1w", "8 h", "1h30m", "0m"])
def test_bad_durations(bad):
    with pytest.raises(UsageError):
        v.validate_duration(bad)


def test_duration_bounds():
    with pytest.raises(UsageError, match="between 1m and 7d"):
        v.validate_duration("8d", minimum=60, maximum=7 * 86400)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["", "s", "m", "h", "d"]))
def test_duration_property(n, unit):
    seconds = n * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    if seconds < 1:
        with pytest.raises(UsageError):
            v.validate_duration(f"{n}{unit}")
    else:
        assert v.validate_duration(f"{n}{unit}") == seconds


# -- CIDRs -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("cidrs", [
    ["0.0.0.0/0"], ["0.0.0.0/1", "128.0.0.0/1"], ["::/0"], ["::/1", "8000::/1"], ["10.0.0.0/8", "0.0.0.0/0"],
    ["0.0.0.0/2", "64.0.0.0/2", "128.0.0.0/2", "192.0.0.0/3", "224.0.0.0/3"], ["::ffff:0:0/96"], ["1.2.3.4/0"],
])
def test_the_whole_internet_is_refused_without_allow_world(cidrs):
    with pytest.raises(UsageError, match="--allow-world"):
        v.validate_allowed_cidrs(cidrs)
    assert v.validate_allowed_cidrs(cidrs, allow_world=True)


@pytest.mark.parametrize("cidrs", [["203.0.113.7/32"], ["0.0.0.0/1"], ["0.0.0.0/1", "128.0.0.0/2"], ["2001:db8::/32", "10.0.0.0/8"]])
def test_partial_ranges_are_allowed(cidrs):
    assert v.validate_allowed_cidrs(cidrs) == [str(ipaddress.ip_network(c, strict=False)) for c in cidrs]


@pytest.mark.parametrize("bad", [[], ["nonsense"], ["10.0.0.0/33"], [" 10.0.0.0/8"], ["10.0.0.0/8/8"]])
def test_bad_cidrs(bad):
    with pytest.raises(UsageError):
        v.validate_allowed_cidrs(bad)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.builds(lambda a, p: str(ipaddress.ip_network((a, p), strict=False)),
                          st.integers(0, 2**32 - 1), st.integers(0, 32)), min_size=1, max_size=6))
def test_cidr_world_check_matches_address_counting(cidrs):
    nets = list(ipaddress.collapse_addresses(ipaddress.ip_network(c) for c in cidrs))
    covered = sum(n.num_addresses for n in nets)
    assert (v.opens_world(cidrs) == ["0.0.0.0/0"]) == (covered == 2**32)


def test_ec2_spec_uses_the_cidr_check():
    from envctl.cloud.ec2 import Ec2LabSpec

    spec = Ec2LabSpec(lab="lab-a", region="us-east-2", allow_cidrs=("0.0.0.0/1", "128.0.0.0/1"), owner="t")
    with pytest.raises(UsageError, match="--allow-world"):
        spec.validate()
    with pytest.raises(UsageError, match="lab name"):
        Ec2LabSpec(lab="../x", region="us-east-2", allow_cidrs=("10.0.0.0/8",), owner="t").validate()


# -- tokens ----------------------------------------------------------------------------------------

def test_tokens():
    import secrets

    tok = secrets.token_urlsafe(32)
    assert v.validate_token(tok) == tok
    for bad in ["", "short", "a" * 300, "with/slash/0123456789", "with space 0123456789", "ünïcödé-0123456789"]:
        with pytest.raises(UsageError):
            v.validate_token(bad)


# -- secrets masking -------------------------------------------------------------------------------

def _site(passwords, secrets=(), settings=None):
    from envctl.catalog import load_catalog

    site = load_catalog().site("classifieds")
    accounts = tuple(site.accounts[0].model_copy(update={"password": p}) for p in passwords)
    return site.model_copy(update={"accounts": accounts, "secrets": tuple(secrets), "settings": settings or {}})


@pytest.mark.parametrize("pw", ["", "a", "\"", "ab", "{", "\\"])
def test_empty_or_tiny_passwords_neither_crash_nor_garble(pw):
    site = _site([pw], ["reset_token"], {"reset_token": pw})
    text = json.dumps({"a": "banana", "b": ["x\"y", "{}"]})
    assert mask_text(site, text) == text
    data = mask_data(site.model_dump(mode="json"), site=site)
    assert json.loads(json.dumps(data)) == data
    assert data["accounts"][0]["password"] == "***" and data["settings"]["reset_token"] == "***"
    assert data["title"] == site.title


def test_old_mask_garbled_empty_passwords():
    """The bug: provision.local.mask replaced '' (every gap) and single letters; mask_text does not."""
    site = _site([""])
    assert mask_text(site, "hello") == "hello"


def test_mask_text_hides_secrets_but_not_words():
    site = _site(["Password.123"], ["reset_token"], {"reset_token": "4b61655535e7ed388f0d40a93600254c"})
    out = mask_text(site, "login Password.123 token=4b61655535e7ed388f0d40a93600254c mysql -ppassword "
                          "MYSQL_ROOT_PASSWORD=password config:set admin/security/password_is_forced 0")
    assert "Password.123" not in out and "4b6165" not in out and "-ppassword" not in out and "=password" not in out
    assert "admin/security/password_is_forced" in out


def test_mask_data_walks_structures():
    data = {"password": "pw1", "user": "bob", "db": {"MYSQL_ROOT_PASSWORD": "x", "MYSQL_DATABASE": "osclass"},
            "env": [{"GITLAB_TOKEN": 123}], "login": {"password": {"label": "Password"}}, "api_key": "k",
            "expect_json_key": "name", "keyword": "Delete", "client_secret": None, "KeyMaterial": "-----BEGIN",
            "tokens": ["t1", "t2"], "secrets": ["reset_token"], "flag": True}
    out = mask_data(data)
    assert out["password"] == "***" and out["user"] == "bob"
    assert out["db"] == {"MYSQL_ROOT_PASSWORD": "***", "MYSQL_DATABASE": "osclass"}
    assert out["env"] == [{"GITLAB_TOKEN": "***"}] and out["login"] == {"password": {"label": "Password"}}
    assert out["api_key"] == "***" and out["expect_json_key"] == "name" and out["keyword"] == "Delete"
    assert out["client_secret"] is None and out["KeyMaterial"] == "***" and out["tokens"] == ["***", "***"]
    assert out["secrets"] == ["reset_token"] and out["flag"] is True
    assert data["password"] == "pw1"  # a copy


def test_catalog_dump_masks_every_known_secret():
    from envctl.catalog import load_catalog

    cat = load_catalog()
    for name in cat.sites:
        site = cat.site(name)
        out = json.dumps(mask_data(site.model_dump(mode="json"), site=site))
        for a in site.accounts:
            assert f'"{a.password}"' not in out and f" {a.password}" not in out, (name, a.username)
        for key in site.secrets:
            assert site.settings[key] not in out
    assert '"MYSQL_ROOT_PASSWORD": "***"' in json.dumps(mask_data(cat.site("classifieds").model_dump(mode="json")))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=6), st.text(max_size=80))
def test_mask_secrets_property(secret, text):
    out = mask_secrets(text, [secret])
    if len(secret) < 3:
        assert out == mask_secrets(text, [])  # short secrets are ignored, never garble
    masked = mask_data({"password": secret, "note": text})
    assert masked["password"] == "***" and masked["note"] == text


def test_secret_key_names():
    for k in ("password", "passwd", "db_pass", "PWD", "MYSQL_ROOT_PASSWORD", "reset_token", "clientSecret", "api_key",
              "apiKey", "private_key", "key"):
        assert is_secret_key(k), k
    for k in ("user", "keyword", "expect_json_key", "monkey", "passage", "keys_count"):
        assert not is_secret_key(k), k


# -- private state files ---------------------------------------------------------------------------

def test_lock_dir_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    from envctl.locks import UnsafeStateDir, state_dir

    if os.getuid() != 0:
        pytest.skip("needs root to make a directory owned by another user")
    monkeypatch.delenv("ENVCTL_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    planted = tmp_path / f"envctl-{os.getuid()}"
    planted.mkdir(mode=0o777)
    os.chown(planted, 12345, 12345)
    with pytest.raises(UnsafeStateDir) as err:
        state_dir()
    assert "uid 12345" in str(err.value) and "ENVCTL_STATE_DIR" in str(err.value)


def test_lock_dir_symlink_is_refused_and_loose_mode_tightened(tmp_path, monkeypatch):
    from envctl.locks import UnsafeStateDir, state_dir

    monkeypatch.delenv("ENVCTL_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f"envctl-{os.getuid()}").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeStateDir, match="symbolic link"):
        state_dir()
    (tmp_path / f"envctl-{os.getuid()}").unlink()
    (tmp_path / f"envctl-{os.getuid()}").mkdir(mode=0o777)
    os.chmod(tmp_path / f"envctl-{os.getuid()}", 0o777)
    assert stat.S_IMODE(os.stat(state_dir()).st_mode) == 0o700


def test_unexpected_error_traceback_goes_to_a_private_state_file(tmp_path, monkeypatch):
    import tempfile

    from click.testing import CliRunner

    from envctl import cli as cli_mod

    monkeypatch.setenv("ENVCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp" / "envctl-debug.log").symlink_to(tmp_path / "victim")
    group = type(cli_mod.cli)(name="t")  # envctl's own group class: its error boundary

    @group.command()
    def boom() -> None:
        raise RuntimeError("kaboom")

    res = CliRunner().invoke(group, ["boom"])
    log = tmp_path / "state" / "debug.log"
    assert res.exit_code == 1 and str(log) in res.output
    assert "kaboom" in log.read_text() and stat.S_IMODE(os.stat(log).st_mode) == 0o600
    assert not (tmp_path / "victim").exists()


def test_debug_log_never_follows_a_symlink(tmp_path, monkeypatch):
    from envctl.locks import write_debug_log

    monkeypatch.setenv("ENVCTL_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "debug.log").symlink_to(tmp_path / "victim")
    assert write_debug_log("trace") is None and not (tmp_path / "victim").exists()
