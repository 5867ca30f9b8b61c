"""The map site's mini images run the way upstream's are run: the database like
``openstreetmap-website-db:latest`` (an official-``postgres``-style image) and the routers with the
upstream ``osrm-routed --algorithm mld /data/us-northeast-latest.osrm`` command, which takes its profile
from the mounted dataset (an empty mounted data directory gets the image's own datasets)."""
from __future__ import annotations

import json
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from conftest import Containers, free_port, wait_http

pytestmark = [pytest.mark.docker, pytest.mark.mini]

OSRM_COMMAND = ["osrm-routed", "--algorithm", "mld", "/data/us-northeast-latest.osrm"]
ROUTE = "/route/v1/cycling/-79.9959,40.4406;-79.9,40.45?overview=false"


def _name() -> str:
    return f"envctl-hA-{uuid.uuid4().hex[:8]}"


def _run(c: Containers, *args: str) -> str:
    """``docker run -d ARGS`` (options, image, command), for the volumes ``Containers.run`` lacks;
    removed with the fixture's containers."""
    name = _name()
    c.names.append(name)
    subprocess.run(["docker", "run", "-d", "--name", name, "--label", "envctl.test", *args],
                   check=True, capture_output=True)
    return name


def _inspect(name: str, fmt: str) -> str:
    return subprocess.run(["docker", "inspect", "-f", fmt, name], capture_output=True, text=True,
                          check=True).stdout.strip()


# ---------------------------------------------------------------- map-db

def _pg_startup(port: int, user: str, database: str) -> str:
    """Send a protocol-3 StartupMessage over TCP and read the answer up to ReadyForQuery: "ready"
    (trust: AuthenticationOk, then ReadyForQuery), "error: <server message>", or "" when nothing answers."""
    params = f"user\0{user}\0database\0{database}\0\0".encode()
    buf = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
            s.sendall(struct.pack("!II", 8 + len(params), 196608) + params)
            while True:
                while len(buf) >= 5 and len(buf) >= 1 + struct.unpack("!I", buf[1:5])[0]:
                    kind, size = buf[:1], struct.unpack("!I", buf[1:5])[0]
                    body, buf = buf[5:1 + size], buf[1 + size:]
                    if kind == b"Z":
                        return "ready"
                    if kind == b"E":
                        fields = {f[:1]: f[1:] for f in body.split(b"\0") if f}
                        return "error: " + fields.get(b"M", b"").decode()
                    if kind == b"R" and body[:4] != b"\0\0\0\0":
                        return "password requested"
                chunk = s.recv(4096)
                if not chunk:
                    return ""
                buf += chunk
    except OSError:
        return ""


def _wait_pg(port: int, name: str, timeout: float = 60) -> None:
    # Over TCP: the entrypoint's setup server listens on the Unix socket only, so this sees the real one.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _pg_startup(port, "postgres", "openstreetmap") == "ready":
            return
        time.sleep(0.25)
    logs = subprocess.run(["docker", "logs", "--tail", "30", name], check=False, capture_output=True, text=True)
    pytest.fail(f"map-db not ready on 127.0.0.1:{port} after {timeout}s\n{logs.stdout}{logs.stderr}")


def test_map_db_runs_like_the_postgres_image(mini_image, containers: Containers) -> None:
    image = mini_image("map-db")
    cfg = json.loads(_inspect(image, "{{json .Config}}"))
    assert cfg["StopSignal"] == "SIGINT" and "/var/lib/postgresql/data" in cfg["Volumes"]
    assert "5432/tcp" in cfg["ExposedPorts"]
    assert {"org.envctl.flavor": "mini", "org.envctl.site": "map", "org.envctl.component": "db",
            "org.envctl.data-version": "1"}.items() <= cfg["Labels"].items()

    port = free_port()
    name = containers.run(image, ports={5432: port}, name=_name(),
                          env={"POSTGRES_DB": "openstreetmap", "POSTGRES_HOST_AUTH_METHOD": "trust"})
    _wait_pg(port, name)
    assert _pg_startup(port, "postgres", "no_such_db") == 'error: database "no_such_db" does not exist'
    assert containers.exec(name, "pg_isready").returncode == 0
    ps = containers.exec(name, "ps", "-o", "user=,args=", "-p", "1").stdout.split()
    assert ps[:2] == ["postgres", "postgres"]  # PID 1, so docker stop's SIGINT reaches it
    q = containers.exec(name, "psql", "-U", "postgres", "-d", "openstreetmap", "-Atc",
                        "create table envctl_probe(x int); insert into envctl_probe values (42); select 1")
    assert q.stdout.split() == ["CREATE", "TABLE", "INSERT", "0", "1", "1"], q.stderr

    start = time.monotonic()
    subprocess.run(["docker", "stop", "-t", "10", name], check=True, capture_output=True)
    took = time.monotonic() - start
    assert took < 5 and _inspect(name, "{{.State.ExitCode}}") == "0", took
    assert "database system is shut down" in containers.logs(name)

    subprocess.run(["docker", "start", name], check=True, capture_output=True)
    _wait_pg(port, name)
    q = containers.exec(name, "psql", "-U", "postgres", "-d", "openstreetmap", "-Atc", "select x from envctl_probe")
    assert q.stdout.strip() == "42"
    assert containers.logs(name).count("PostgreSQL init process complete") == 1  # no second initdb


def test_map_db_refuses_to_init_without_password_or_trust(mini_image, containers: Containers) -> None:
    name = containers.run(mini_image("map-db"), name=_name())
    code = subprocess.run(["docker", "wait", name], check=False, capture_output=True, text=True, timeout=60).stdout.strip()
    assert code != "0" and "POSTGRES_PASSWORD" in containers.logs(name)


# ---------------------------------------------------------------- osrm-routed

def _dataset(d: Path, weight: str) -> Path:
    d.mkdir()
    (d / "us-northeast-latest.osrm.properties").write_text(json.dumps({"weight_name": weight}))
    d.chmod(0o755)
    return d


def test_osrm_routed_takes_the_profile_from_the_dataset(mini_image, containers: Containers, tmp_path: Path) -> None:
    image = mini_image("map-backend")
    bike_port, ref_port, car_port = free_port(), free_port(), free_port()
    bike = _run(containers, "-v", f"{_dataset(tmp_path / 'bike', 'cyclability')}:/data:ro",
                "-p", f"127.0.0.1:{bike_port}:5000", image, *OSRM_COMMAND)
    containers.run(image, ports={5000: ref_port}, command=["osrm", "bike"], name=_name())
    # other option spellings and order; the port option is honoured
    car = _run(containers, "-v", f"{_dataset(tmp_path / 'car', 'routability')}:/data:ro",
               "-p", f"127.0.0.1:{car_port}:5001", image,
               "osrm-routed", "/data/us-northeast-latest.osrm", "-p", "5001", "-a", "MLD")

    got = wait_http(f"http://127.0.0.1:{bike_port}{ROUTE}", timeout=30, ok=lambda r: r.status_code == 200,
                    logs=lambda: containers.logs(bike))
    assert '"code":"Ok"' in got.text.replace(" ", "")
    body = got.json()
    expected = wait_http(f"http://127.0.0.1:{ref_port}{ROUTE}", timeout=30, ok=lambda r: r.status_code == 200).json()
    assert body == expected  # the same route as the `osrm bike` form
    route = body["routes"][0]
    assert route["weight_name"] == "cyclability"
    assert 14 <= route["distance"] / route["duration"] * 3.6 <= 16  # km/h, a bike's

    car_body = wait_http(f"http://127.0.0.1:{car_port}{ROUTE}", timeout=30, ok=lambda r: r.status_code == 200,
                         logs=lambda: containers.logs(car)).json()
    assert car_body["routes"][0]["weight_name"] == "routability"
    assert car_body["routes"][0]["duration"] < route["duration"]

    start = time.monotonic()
    subprocess.run(["docker", "stop", "-t", "10", bike], check=True, capture_output=True)
    assert time.monotonic() - start < 5 and _inspect(bike, "{{.State.ExitCode}}") == "0"


def test_routers_side_by_side_seed_an_empty_data_directory(mini_image, containers: Containers, tmp_path: Path) -> None:
    """The catalog mounts {data_dir}/map/osrm on /data of each router and names the profile's dataset
    (/data/car/...): three routers starting together on an empty directory seed it once, whole, and each
    routes with its own profile."""
    data = tmp_path / "osrm"
    data.mkdir(mode=0o755)
    image = mini_image("map-backend")
    ports = {p: free_port() for p in ("car", "bike", "foot")}
    names = {p: _run(containers, "-v", f"{data}:/data", "-p", f"127.0.0.1:{port}:5000", image, "osrm-routed",
                     "--algorithm", "mld", f"/data/{p}/us-northeast-latest.osrm") for p, port in ports.items()}
    weights = {}
    for p, port in ports.items():
        body = wait_http(f"http://127.0.0.1:{port}{ROUTE}", timeout=30, ok=lambda r: r.status_code == 200,
                         logs=lambda p=p: containers.logs(names[p])).json()
        weights[p] = body["routes"][0]["weight_name"]
    assert weights == {"car": "routability", "bike": "cyclability", "foot": "duration"}
    files = sorted(str(f.relative_to(data)) for f in data.rglob("*"))
    assert files == sorted(f"{p}{s}" for p in ("bike", "car", "foot")
                           for s in ("", "/us-northeast-latest.osrm", "/us-northeast-latest.osrm.properties"))
    assert json.loads((data / "bike" / "us-northeast-latest.osrm.properties").read_text()) == {"weight_name": "cyclability"}


@pytest.mark.parametrize("content", [None, b"\x00\x01 no weight here"])
def test_osrm_routed_without_a_dataset_exits_with_an_error(mini_image, containers: Containers, tmp_path: Path,
                                                           content: bytes | None) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o755)
    if content is not None:
        (data / "us-northeast-latest.osrm.properties").write_bytes(content)
    name = _run(containers, "-v", f"{data}:/data:ro", mini_image("map-backend"), *OSRM_COMMAND)
    code = subprocess.run(["docker", "wait", name], check=False, capture_output=True, text=True, timeout=60).stdout.strip()
    logs = subprocess.run(["docker", "logs", name], check=False, capture_output=True, text=True)
    assert code not in ("", "0")
    err = logs.stderr.strip().splitlines()
    assert len(err) == 1 and "/data/us-northeast-latest.osrm.properties" in err[0], logs
