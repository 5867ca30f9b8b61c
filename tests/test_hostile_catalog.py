"""Hostile catalogs and environment variables (issue 25): every refusal is one CatalogError line that
names the file and the field; hypothesis mutates string and path fields and finds no other exception."""
from __future__ import annotations

import copy
import os
import re
import threading
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envctl.catalog import BUILTIN, CATALOG_MAX_BYTES, load_catalog
from envctl.errors import CatalogError, UsageError
from envctl.paths import confined
from envctl.validate import ENV_VAR_NAMES, ENV_VARS, env_report, env_value, validate_site_name

PKG = Path(__file__).resolve().parent.parent / "envctl"
RAW = yaml.safe_load(BUILTIN.read_text())
EXAMPLES = {"count": 0}


DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _copy():
    return copy.deepcopy(RAW)


def _set(raw, path: str, value):
    node = raw
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return raw


def _write(tmp: Path, raw, name="sites.yaml") -> Path:
    f = tmp / name
    f.write_text(yaml.dump(raw, Dumper=DUMPER, allow_unicode=True))
    return f


def _refused(f: Path, *expected: str) -> str:
    with pytest.raises(CatalogError) as exc:
        load_catalog(f)
    msg = str(exc.value)
    assert "\n" not in msg and "\r" not in msg, msg
    assert msg.startswith(f"invalid catalog {f}: "), msg
    for e in expected:
        assert e in msg, (e, msg)
    return msg


# -- the built-in catalog passes everything ------------------------------------------------------

def test_builtin_catalog_loads_and_its_names_pass_the_pattern():
    cat = load_catalog()
    for name, site in cat.sites.items():
        assert validate_site_name(name) == name
        for svc in site.services:
            assert validate_site_name(svc, "service name") == svc
    assert re.fullmatch(r"[a-z][a-z0-9_]{0,39}", "osrm_foot")


# -- path fields: refused at load, named by their path --------------------------------------------

ART = "sites.wikipedia.flavors.full.artifacts.0"
MAP_ARTS = RAW["sites"]["map"]["flavors"]["full"]["artifacts"]
OSM_DUMP = next(i for i, a in enumerate(MAP_ARTS) if a.get("dest") == "map/osm_dump.tar")
PATHS = [
    (f"{ART}.dest", "/etc/passwd", "artifacts[0].dest: dest '/etc/passwd' is absolute"),
    (f"{ART}.dest", "../../etc/cron.d/x", "artifacts[0].dest: dest '../../etc/cron.d/x' contains '..'"),
    (f"{ART}.dest", "wiki/\0x", "artifacts[0].dest"),
    (f"{ART}.dest", "", "artifacts[0].dest: dest is empty"),
    (f"{ART}.name", "../x.tar", "artifacts[0].name: artifact name '../x.tar' contains '..'"),
    (f"{ART}.name", "sub/x.tar", "artifacts[0].name: artifact name 'sub/x.tar': expected a file name"),
    (f"sites.map.flavors.full.artifacts.{OSM_DUMP}.extract.destination", "{data_dir}/../../root",
     f"artifacts[{OSM_DUMP}].extract.destination: extract target"),
    (f"sites.map.flavors.full.artifacts.{OSM_DUMP}.extract.destination", "/etc",
     f"artifacts[{OSM_DUMP}].extract.destination"),
    (f"sites.map.flavors.full.artifacts.{OSM_DUMP}.extract.strip", "/abs", "extract.strip: strip '/abs'"),
    ("sites.wikipedia.services.web.volumes.0.source", "/", "volumes[0].source: volume source '/'"),
    ("sites.wikipedia.services.web.volumes.0.source", "{data_dir}/../..", "volumes[0].source"),
    ("sites.wikipedia.services.web.volumes.0.target", "/data:rw", "volumes[0].target"),
    ("sites.homepage.services.web.flavors.mini.build", "../../../../tmp", "flavors.mini.build: build '../../../../tmp'"),
]


@pytest.mark.parametrize("path,value,expected", PATHS, ids=[f"{p[0].split('.')[-1]}={p[1]!r}" for p in PATHS])
def test_path_fields_refused_at_load(tmp_path, path, value, expected):
    if path.endswith(".build") and "build" not in RAW["sites"]["homepage"]["services"]["web"]["flavors"]["mini"]:
        pytest.skip("homepage has no build")
    _refused(_write(tmp_path, _set(_copy(), path, value)), expected)


def test_confined_refuses_escapes_at_use_time(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    assert confined(root, "map/osm_dump") == root / "map" / "osm_dump"
    for bad in ("/etc/passwd", "../x", "a/../../x", "", "a\0b"):
        with pytest.raises(UsageError):
            confined(root, bad, "dest")
    (root / "evil").symlink_to("/etc")
    with pytest.raises(UsageError, match="leads outside"):
        confined(root, "evil/cron.d/x", "dest")


def test_images_get_and_extract_confine_their_paths(tmp_path):
    from envctl.images import extract as ex
    from envctl.images import get

    class Art:
        name, dest = "x.tar", "../../outside"

    opts = get.Options(data_root=tmp_path / "data", downloads=tmp_path / "dl")
    with pytest.raises(UsageError, match="contains '..'"):
        get._data_path(Art(), opts)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="contains '..'"):
        ex.render("{data_dir}/../../etc", tmp_path, "default")
    (tmp_path / "map").symlink_to("/etc")
    with pytest.raises(UsageError, match="leads outside"):
        ex.render("{data_dir}/map/osm_dump", tmp_path, "default")


# -- names -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["Shopping", "shop-ping", "1shop", "a" * 41, "shop/../x", "şhop"])
def test_site_and_service_names_follow_one_pattern(tmp_path, bad):
    raw = _copy()
    raw["sites"][bad] = raw["sites"].pop("homepage")
    _refused(_write(tmp_path, raw), "sites: invalid site name")
    raw = _copy()
    svc = raw["sites"]["shopping"]["services"]
    svc[bad] = svc.pop("web")
    _refused(_write(tmp_path, raw), "sites.shopping.services: invalid service name")


# -- YAML-level refusals -----------------------------------------------------------------------------

def test_duplicate_site_is_refused_with_its_line(tmp_path):
    text = BUILTIN.read_text()
    block = text[text.index("  homepage:"):]
    f = tmp_path / "dup.yaml"
    f.write_text(text + block)
    msg = _refused(f, "duplicate key 'homepage' (first given on line")
    assert re.search(r": line \d+, column \d+: duplicate key", msg)


def test_duplicate_nested_key_is_refused(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("version: 1\nreset_server: {port: 7565, port: 7566}\nsites: {}\n")
    _refused(f, "line 2", "duplicate key 'port'")


def test_merge_keys_are_not_duplicates(tmp_path):
    f = tmp_path / "merge.yaml"
    f.write_text("version: 1\nbase: &b {port: 1}\nreset_server: {<<: *b, port: 7565}\nsites: {}\n")
    _refused(f, "base: unknown key")  # the merge itself loads; only the extra key is reported


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_non_finite_numbers_are_refused(tmp_path, value):
    text = BUILTIN.read_text().replace("      timeout: 300\n", f"      timeout: {value}\n", 1)
    f = tmp_path / "inf.yaml"
    f.write_text(text)
    _refused(f, ".health.timeout: ", "not a finite number")


@pytest.mark.parametrize("path,value,expected", [
    ("sites.shopping.services.web.ports.public", "7770", "sites.shopping.services.web.ports.public: input should be a valid integer"),
    ("sites.shopping.services.web.ports.public", True, "sites.shopping.services.web.ports.public: input should be a valid integer"),
    ("sites.shopping.services.web.stop_timeout", 60.0, "sites.shopping.services.web.stop_timeout: input should be a valid integer"),
    ("sites.shopping.health.timeout", "300", "sites.shopping.health.timeout: input should be a valid number"),
    ("sites.shopping.health.timeout", True, "sites.shopping.health.timeout"),
    ("sites.shopping.reset.spares", False, "sites.shopping.reset.spares"),
    ("sites.wikipedia.services.web.volumes.0.read_only", "yes", "volumes[0].read_only: input should be a valid boolean"),
    ("reset_server.port", "7565", "reset_server.port: input should be a valid integer"),
    ("version", True, "version: expected 1"),
])
def test_undocumented_coercions_are_refused(tmp_path, path, value, expected):
    _refused(_write(tmp_path, _set(_copy(), path, value)), expected)


def test_nul_in_any_string_is_refused(tmp_path):
    raw = _set(_copy(), "sites.shopping.title", "One\0Stop")
    _refused(_write(tmp_path, raw), "sites.shopping.title: contains a NUL byte")
    raw = _copy()
    raw["sites"]["shopping"]["settings"] = {"a\0b": "x"}
    _refused(_write(tmp_path, raw), "sites.shopping.settings: key 'a\\x00b' contains a NUL byte")


def test_raw_control_character_is_one_line(tmp_path):
    f = tmp_path / "ctl.yaml"
    f.write_bytes(b"version: 1\nsites: {a: \x01}\n")
    _refused(f, "not valid YAML (unacceptable character")


def test_two_listeners_on_one_port_and_the_reset_server_port(tmp_path):
    raw = _set(_copy(), "sites.reddit.services.web.ports.public", 7565)
    _refused(_write(tmp_path, raw), "sites.reddit.services.web.ports.public: port 7565 is also used by reset_server.port")
    raw = _set(_copy(), "reset_server.port", 9999)
    _refused(_write(tmp_path, raw), "port 9999 is also used by reset_server.port")
    raw = _set(_copy(), "sites.map.services.osrm_bike.ports.public", 5000)
    _refused(_write(tmp_path, raw), "ports.public: port 5000 is also used by map.osrm_")


def test_nesting_deeper_than_the_limit(tmp_path):
    f = tmp_path / "deep.yaml"
    f.write_text("version: 1\nsites: " + "[" * 5000 + "]" * 5000 + "\n")
    _refused(f, "nested deeper than 64 levels")
    f.write_text("version: 1\nsites: " + "{a: " * 70 + "1" + "}" * 70 + "\n")
    _refused(f, "nested deeper than 64 levels")


def test_alias_bombs_and_self_reference(tmp_path):
    f = tmp_path / "bomb.yaml"
    lines = ["version: 1", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}]"
              for i in range(1, 9)]
    f.write_text("\n".join(lines) + "\nsites: *a8\n")
    _refused(f, "more than 200000 values")
    f.write_text("version: 1\nsites: &s [*s]\n")
    _refused(f, "nested deeper than 64 levels")


def test_too_large_file(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_text("version: 1\n" + "#" * (CATALOG_MAX_BYTES + 10) + "\n")
    _refused(f, "larger than the 4 MiB limit")


def test_fifo_directory_unreadable_and_not_utf8(tmp_path, monkeypatch):
    fifo = tmp_path / "catalog.fifo"
    os.mkfifo(fifo)
    done: list[BaseException] = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(CatalogError, load_catalog, fifo).value))
    t.start()
    t.join(5)
    assert not t.is_alive(), "load_catalog hung on a FIFO"
    assert "is a FIFO, not a regular file" in str(done[0]) and str(fifo) in str(done[0])
    monkeypatch.setenv("ENVCTL_CATALOG", str(tmp_path))
    _refused(tmp_path, "is a directory")
    monkeypatch.delenv("ENVCTL_CATALOG")
    f = tmp_path / "latin1.yaml"
    f.write_bytes(b"version: 1\ntitle: caf\xe9\n")
    _refused(f, "not UTF-8 text")
    f = tmp_path / "secret.yaml"
    f.write_text("version: 1\n")
    f.chmod(0)
    if os.geteuid() == 0:
        return  # root reads it anyway
    _refused(f, "permission denied")


def test_cli_refuses_a_fifo_catalog_in_one_line(tmp_path):
    from click.testing import CliRunner

    from envctl.cli import cli

    fifo = tmp_path / "c.fifo"
    os.mkfifo(fifo)
    res = CliRunner().invoke(cli, ["sites", "list"], env={"ENVCTL_CATALOG": str(fifo)})
    assert res.exit_code == 2, res.output
    assert "is a FIFO" in res.output and str(fifo) in res.output


# -- environment variables ---------------------------------------------------------------------------

def _reads() -> set[str]:
    """Every variable name envctl's own code reads (the mini images excluded)."""
    names: set[str] = set()
    pattern = re.compile(r"(?:environ\.get|getenv|env_value|\be\.get)\(\s*[\"']([A-Z_][A-Z0-9_]*)[\"']"
                         r"|environ\[[\"']([A-Z_][A-Z0-9_]*)[\"']\]|envvar=[\"']([A-Z_][A-Z0-9_]*)[\"']"
                         r"|_ENV = [\"']([A-Z_][A-Z0-9_]*)[\"']")
    for f in PKG.rglob("*.py"):
        if "mini" in f.relative_to(PKG).parts:
            continue
        for m in pattern.finditer(f.read_text()):
            names.add(next(g for g in m.groups() if g))
    return names


def test_every_variable_envctl_reads_is_in_the_table():
    reads = _reads()
    assert {"ENVCTL_CATALOG", "ENVCTL_MIN_RATE", "ENVCTL_DATA_DIR", "ENVCTL_DISK_BUDGET_BYTES"} <= reads
    missing = reads - ENV_VAR_NAMES
    assert not missing, f"add to validate.ENV_VARS: {sorted(missing)}"
    assert all(v.meaning for v in ENV_VARS)


@pytest.mark.parametrize("name,value", [
    ("ENVCTL_MIN_RATE", "fast"), ("ENVCTL_MIN_RATE", "inf"), ("ENVCTL_MIN_RATE", "-1"), ("ENVCTL_MIN_RATE", "nan"),
    ("ENVCTL_DISK_BUDGET_BYTES", "10GB"), ("ENVCTL_REGISTRY_MIRROR", "http://a b"), ("ENVCTL_INSTANCE", "../x"),
    ("ENVCTL_DATA_DIR", "/tmp/a\nb"), ("ENVCTL_AGENT_BASE_URL", "localhost:8000"),
])
def test_garbage_in_a_variable_is_one_line_naming_it(name, value):
    with pytest.raises(UsageError) as exc:
        env_value(name, {name: value})
    assert name in str(exc.value) and "\n" not in str(exc.value)


def test_min_rate_reaches_images_get_validated(monkeypatch, tmp_path):
    from envctl.images import get

    monkeypatch.setenv("ENVCTL_MIN_RATE", "1024")
    assert get._min_rate() == 1024.0
    monkeypatch.setenv("ENVCTL_MIN_RATE", "lots")
    with pytest.raises(UsageError, match="ENVCTL_MIN_RATE"):
        get._min_rate()


def test_env_report_masks_secrets():
    token = "s3cr3t-" + "x" * 30
    rows = {r["name"]: r for r in env_report({"ENVCTL_SERVE_TOKEN": token, "ENVCTL_AGENT_API_KEY": "sk-123456",
                                              "ENVCTL_LEASE_SERVER": f"ftp://h/{token}", "ENVCTL_MIN_RATE": "1"})}
    assert rows["ENVCTL_SERVE_TOKEN"]["value"] == "***" and rows["ENVCTL_SERVE_TOKEN"]["problem"] is None
    assert rows["ENVCTL_AGENT_API_KEY"]["value"] == "***"
    assert token not in str(rows["ENVCTL_LEASE_SERVER"]) and rows["ENVCTL_LEASE_SERVER"]["problem"]
    assert rows["ENVCTL_MIN_RATE"]["value"] == "1" and not rows["ENVCTL_CATALOG"]["set"]


def test_doctor_lists_the_environment():
    from envctl.doctor import environment_checks

    rows = environment_checks(env_report({"ENVCTL_MIN_RATE": "x", "ENVCTL_JUDGE_API_KEY": "sk-abcdef"}))
    by = {r["check"]: r for r in rows}
    assert by["$ENVCTL_MIN_RATE"]["status"] == "fail" and "ENVCTL_MIN_RATE" in by["$ENVCTL_MIN_RATE"]["fix"]
    assert by["$ENVCTL_JUDGE_API_KEY"]["detail"].startswith("***")
    assert "ENVCTL_CATALOG" in by["environment"]["detail"]


# -- property: mutate string and path fields; load or CatalogError in one line, nothing else ------------

def _string_fields(obj, path=()):
    if isinstance(obj, str):
        yield path
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _string_fields(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _string_fields(v, path + (i,))


FIELDS = sorted(set(_string_fields(RAW)), key=str)
PATH_FIELDS = [f for f in FIELDS if f[-1] in ("dest", "name", "destination", "strip", "source", "target", "build")
               or (len(f) > 1 and f[-2] == "destination")]
HOSTILE = st.one_of(
    st.sampled_from(["/", "/etc/passwd", "..", "../..", "a/../../b", "{data_dir}/../x", "{data_dir}", "", ".",
                     "\0", "a\0b", "~root", "\\..\\x", "{instance}/..", "x" * 5000, "🦄/ü", "\n", "a\nb: c",
                     "{sites.nope.public_url}", "{setting.nope}", "'\"", "- [", "&a *a", "!!python/object:os.system"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80),
    st.builds(lambda a, b: f"{a}/{b}", st.sampled_from(["..", "", "{data_dir}", "x", "\0"]), st.text(max_size=20)),
)


def _mutated(field, value):
    raw = _copy()
    node = raw
    for k in field[:-1]:
        node = node[k]
    node[field[-1]] = value
    return raw


def _check_loads_or_one_line(tmp: Path, raw):
    EXAMPLES["count"] += 1
    f = tmp / "sites.yaml"
    f.write_text(yaml.dump(raw, Dumper=DUMPER, allow_unicode=True))
    try:
        return load_catalog(f)
    except CatalogError as exc:
        msg = str(exc)
        assert "\n" not in msg and "\r" not in msg, msg
        assert msg.startswith(f"invalid catalog {f}: ")
        return None


PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@PROPERTY
@given(field=st.sampled_from(FIELDS), value=HOSTILE)
def test_property_any_string_field_mutated(tmp_path, field, value):
    _check_loads_or_one_line(tmp_path, _mutated(field, value))


@PROPERTY
@given(field=st.sampled_from(PATH_FIELDS), value=HOSTILE)
def test_property_path_fields_never_escape(tmp_path, field, value):
    raw = _mutated(field, value)
    cat = _check_loads_or_one_line(tmp_path, raw)
    if cat is None:
        return
    for site in cat.sites.values():  # whatever loaded stays under the data dir
        for flavor in site.flavors.values():
            for art in flavor.artifacts:
                if art.dest:
                    confined(tmp_path, art.dest)
                confined(tmp_path, art.name)


@PROPERTY
@given(field=st.sampled_from(FIELDS), key=HOSTILE)
def test_property_keys_mutated(tmp_path, field, key):
    raw = _copy()
    node = raw
    for k in field[:-2]:
        node = node[k]
    if isinstance(node, dict) and isinstance(field[-2], str):
        node[key] = node.pop(field[-2])
    _check_loads_or_one_line(tmp_path, raw)


def test_zz_report_examples(capsys):
    with capsys.disabled():
        print(f"\n[hostile catalog] property examples run: {EXAMPLES['count']}")
    assert EXAMPLES["count"] == 0 or EXAMPLES["count"] >= 100
