"""The site catalog: ``sites.yaml`` turned into validated, frozen, typed objects.

This is the only module that reads the catalog YAML. Every problem found (unknown key, wrong
type, missing field, duplicate port, unknown reference) is reported in one ``CatalogError`` that
names the file, the path inside it (``sites.gitlab.services.web.ports.public``) and what is expected.

Steps, env values and URLs are templates rendered against one deployment (:class:`Deployment`):
``{public_url}``, ``{public_host}``, ``{public_port}``, ``{scheme}`` (of the site's entry service),
``{sites.NAME.public_url}``, ``{service.NAME}`` (the container name of a service of the same site copy),
``{setting.NAME}`` (a site setting such as the reset token). Other braces are left alone, so
``{z}/{x}/{y}`` or shell snippets need no escaping.

Example::

    cat = load_catalog()
    cat.site("gitlab").entry_service.ports.public   # 8023
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envctl.errors import UnknownSite, UsageError
from envctl.validate import PATH_MAX, validate_memory_size, validate_relative_path, validate_site_name

BUILTIN = Path(__file__).resolve().parent.parent / "sites.yaml"
Benchmark = Literal["webarena", "visualwebarena"]
Tier = Literal["spare", "inplace", "endpoint", "recreate", "none"]


class _Model(BaseModel):
    # No inf/nan anywhere; load_catalog validates in strict mode (no "7770" for 7770, no true for 1).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _rel(value: str, what: str, under: str = "the data directory") -> str:
    """``validate_relative_path`` for a model validator (which reports ValueErrors with the field's path)."""
    try:
        return validate_relative_path(value, what, under=under)
    except UsageError as exc:
        raise ValueError(str(exc)) from None


MEMORY_LIMIT_MIN, MEMORY_LIMIT_MAX = 6 << 20, 1 << 40  # Docker refuses a limit under 6 MiB; 1 TiB is no limit


def _memory_limit(value: str | None) -> str | None:
    """A service's memory limit: 6m (Docker's least) to 1024g; 0 (which Docker reads as 'no limit'
    and the capacity plan as 'nothing') is refused."""
    if value is not None:
        try:
            validate_memory_size(value, "memory", minimum=MEMORY_LIMIT_MIN, maximum=MEMORY_LIMIT_MAX)
        except UsageError as exc:
            raise ValueError(f"{exc.message}: {exc.hint}") from None
    return value


def _names(value: dict[str, Any], what: str) -> dict[str, Any]:
    """The keys of a {name: ...} mapping checked with ``validate_site_name`` (they become container
    names, labels and file names)."""
    for name in value:
        try:
            validate_site_name(name, what)
        except UsageError as exc:
            raise ValueError(str(exc)) from None
    return value


def dependency_order(names: list[str], deps: Callable[[str], Iterable[str]]) -> list[str]:
    """``names`` and their dependencies, each after everything it depends on (the one such ordering)."""
    order: list[str] = []

    def visit(n: str) -> None:
        if n in order:
            return
        for d in deps(n):
            visit(d)
        order.append(n)

    for n in names:
        visit(n)
    return order


class Ports(_Model):
    public: int = Field(ge=1, le=65535)
    # "public" means: the app listens on the same port it is published on (GitLab's external_url rule).
    container: Annotated[int, Field(ge=1, le=65535)] | Literal["public"] = Field(default=80)

    def container_port(self, public: int) -> int:
        return public if self.container == "public" else int(self.container)


class Volume(_Model):
    source: str  # a named volume, or {data_dir}/... for downloaded data
    target: str
    read_only: bool = False

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v.startswith("{data_dir}"):
            rest = v[len("{data_dir}"):]
            if not rest.startswith("/") or "{" in rest:
                raise ValueError(f"volume source {v!r}: expected {{data_dir}}/<path> or a Docker volume name")
            _rel(rest[1:], "volume source")
            if "," in rest or ":" in rest:
                raise ValueError(f"volume source {v!r}: ',' and ':' are not allowed (Docker's mount syntax)")
            return v
        if len(v) > 128 or not _VOLUME_NAME.match(v):
            raise ValueError(f"volume source {v!r}: expected {{data_dir}}/<path> or a Docker volume name "
                             "(no host paths)")
        return v

    @field_validator("target")
    @classmethod
    def _target(cls, v: str) -> str:
        if not v.startswith("/") or len(v) > PATH_MAX or ".." in v.split("/") or any(c in v for c in ",:\0") \
                or not v.isprintable():
            raise ValueError(f"volume target {v!r}: expected an absolute path in the container, without '..', "
                             "',' or ':'")
        return v


_DIGEST_REF = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


class Source(_Model):
    kind: Literal["registry", "http", "gdrive", "s3"]
    mirror: str
    url: str

    @model_validator(mode="after")
    def _digest(self) -> "Source":
        # A registry reference pinned by digest must carry the whole digest; without '@' it is pinned in
        # images.lock by its first pull (as the slim images, whose upstream names no digest).
        if self.kind == "registry" and "@" in self.url and not _DIGEST_REF.match(self.url):
            raise ValueError(f"registry reference {self.url!r} is not repo[:tag]@sha256:<64 hex digits>; give the "
                             "whole digest, or drop '@...' to pin it in images.lock on the first pull")
        return self


_VOLUME_NAME = re.compile(r"^[A-Za-z0-9{][A-Za-z0-9_.{}-]*$")


def _check_target(target: str) -> str:
    """An extract target: ``{data_dir}/relative/path``, or a Docker volume name scoped by ``{instance}``."""
    if target.startswith("{data_dir}"):
        rest = target[len("{data_dir}"):]
        parts = [p for p in rest.split("/") if p]
        if not rest.startswith("/") or not parts or ".." in parts or "{" in rest:
            raise ValueError(f"extract target {target!r}: expected {{data_dir}}/<path> without '..'")
        _rel(rest[1:], "extract target")
        return target
    if "/" in target or len(target) > 128 or not _VOLUME_NAME.match(target):
        raise ValueError(f"extract target {target!r}: expected {{data_dir}}/<path> or a Docker volume name")
    if "{instance}" not in target or target.replace("{instance}", "").count("{"):
        raise ValueError(f"extract target {target!r}: a volume must be instance-scoped, e.g. '{{instance}}-osm-data'")
    return target


class Extract(_Model):
    """How a data archive is unpacked after download: ``format``, ``strip``, then ``destination``.

    ``strip`` removes leading path components (an int) or a leading path prefix (a string) from
    every entry; ``destination`` is one target, or a mapping {entry prefix: target} (one archive
    feeding several targets; entries under no prefix are skipped). A target is
    ``{data_dir}/<path>`` or a Docker volume name containing ``{instance}``.
    """

    format: Literal["tar", "tar.gz", "zip"]
    strip: int | str = 0
    destination: str | dict[str, str]
    size: int | None = Field(default=None, ge=0)  # unpacked bytes (estimate, for the disk pre-check)

    @field_validator("strip")
    @classmethod
    def _strip(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 0:
            raise ValueError("strip: expected a number of leading path components (>= 0) or a path prefix")
        if isinstance(v, str) and (v.startswith("/") or ".." in v.split("/")):
            raise ValueError(f"strip {v!r}: expected a relative path prefix without '..'")
        if isinstance(v, str) and v:
            _rel(v, "strip", "the archive")
        return v

    @field_validator("destination")
    @classmethod
    def _destination(cls, v: str | dict[str, str]) -> str | dict[str, str]:
        if isinstance(v, str):
            return _check_target(v)
        if not v:
            raise ValueError("destination: an empty mapping; expected {entry prefix: target}")
        for prefix, target in v.items():
            if prefix.startswith("/") or ".." in prefix.split("/"):
                raise ValueError(f"destination prefix {prefix!r}: expected a relative path without '..'")
            if prefix:
                _rel(prefix, "destination prefix", "the archive")
            _check_target(target)
        return v

    def targets(self) -> dict[str, str]:
        """{entry prefix ('' = every entry): target}."""
        return {"": self.destination} if isinstance(self.destination, str) else dict(self.destination)


class Artifact(_Model):
    name: str
    kind: Literal["image", "data"] = "image"
    image: str | None = None
    dest: str | None = None
    size: int | None = Field(default=None, ge=0)
    loaded_size: int | None = Field(default=None, ge=0)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    sources: tuple[Source, ...] = ()
    note: str | None = None
    extract: Extract | None = None  # data archives: unpacked after download and verification

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:  # the archive's file name in the downloads directory
        _rel(v, "artifact name", "the downloads directory")
        if "/" in v or "\\" in v or v.startswith("."):
            raise ValueError(f"artifact name {v!r}: expected a file name (no '/', not starting with '.')")
        return v

    @field_validator("dest")
    @classmethod
    def _dest(cls, v: str | None) -> str | None:  # joined onto the data directory
        return None if v is None else _rel(v, "dest")

    @model_validator(mode="after")
    def _kind_fields(self) -> "Artifact":
        if self.kind == "image" and not self.image:
            raise ValueError("an image artifact needs 'image' (the tag the catalog uses)")
        if self.kind == "data" and not self.dest:
            raise ValueError("a data artifact needs 'dest' (path under the data directory)")
        if self.extract is not None and self.kind != "data":
            raise ValueError("'extract' is for data artifacts (kind: data); images are loaded, not unpacked")
        return self


class Step(_Model):
    """One post-start configuration step: an argv run inside a service's container."""

    service: str | None = None  # default: the site's entry service
    run: tuple[str, ...] = Field(min_length=1)
    why: str | None = None


class ServiceFlavor(_Model):
    """What a flavor gives one service: where its image comes from and how much memory it gets.
    Everything else about the service (ports, command, env, volumes, ...) is the site's."""

    image: str
    build: str | None = None  # mini: directory under envctl/images/mini
    memory: str | None = Field(default=None, pattern=r"^[0-9]+[kmg]$")

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: str | None) -> str | None:
        return _memory_limit(v)

    @field_validator("build")
    @classmethod
    def _build(cls, v: str | None) -> str | None:  # joined onto envctl/images/mini
        return None if v is None else _rel(v, "build", "envctl/images/mini")


class Service(_Model):
    ports: Ports | None = None
    depends_on: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    volumes: tuple[Volume, ...] = ()
    memory: str | None = Field(default=None, pattern=r"^[0-9]+[kmg]$")
    user: str | None = None
    tmpfs: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # network aliases on the site's private network
    stop_timeout: int = Field(default=30, ge=1, le=3600)
    # argv run inside the container before 'docker stop' (GitLab: 'gitlab-ctl stop', since PID 1
    # runsvdir does not stop PostgreSQL cleanly on SIGTERM).
    stop: tuple[str, ...] | None = None
    # Docker restart policy (VisualWebArena's classifieds db relies on 'always' for its first init).
    restart: Literal["no", "always", "unless-stopped", "on-failure"] = "no"
    # argv run inside the container until it exits 0: the app can take configure steps.
    ready: tuple[str, ...] | None = None
    # A service without an entry for a flavor does not exist in that flavor.
    flavors: dict[str, ServiceFlavor]

    @field_validator("flavors")
    @classmethod
    def _flavor_names(cls, v: dict[str, ServiceFlavor]) -> dict[str, ServiceFlavor]:
        return _names(v, "flavor name")

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: str | None) -> str | None:
        return _memory_limit(v)


class Flavor(_Model):
    """What a flavor gives a site: a description and the artifacts its images and data come from."""

    description: str = ""
    artifacts: tuple[Artifact, ...] = ()


class Account(_Model):
    username: str
    password: str
    role: str = "user"


class LoginField(_Model):
    """How to find one input: by label, placeholder, test id or CSS selector (first that is set)."""

    label: str | None = None
    placeholder: str | None = None
    test_id: str | None = None
    selector: str | None = None
    button: str | None = None  # a button by its accessible name

    @model_validator(mode="after")
    def _one(self) -> "LoginField":
        if not any((self.label, self.placeholder, self.test_id, self.selector, self.button)):
            raise ValueError("give one of label, placeholder, test_id, selector, button")
        return self


class ExpiryProbe(_Model):
    url: str
    keyword: str | None = None  # None: valid means the final URL equals the probe URL (no redirect)


class HttpLogin(_Model):
    """The login form is a plain HTML form post: resets renew login files with one HTTP GET + POST
    (``envctl.auth.httplogin``), no browser. The form is found by the same field descriptions."""

    # Hidden fields the site's own JavaScript copies into a cookie of the same name before the form
    # is submitted (Magento's page cache: ``form_key``); the HTTP login does the same.
    echo_cookies: tuple[str, ...] = ()


class Login(_Model):
    account: str  # username of one of the site's accounts
    url: str
    username: LoginField
    password: LoginField
    submit: LoginField
    expiry: ExpiryProbe
    # Upstream's auto_login skips pairs that share a cookie on one host ("Auth doesn't work on
    # this pair as they share the same cookie"): this site is never paired with these.
    no_pair_with: tuple[str, ...] = ()
    # Set when the form works with a plain POST (see HttpLogin); None: logins always use the browser.
    http: HttpLogin | None = None


_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")  # an HTTP field name (RFC 9110 token)


class HeaderLogin(_Model):
    """Login by request header (webarena-verified's images, docs/flavors/slim.md): a request carrying
    ``header: value`` is served logged in as the site's login account. The site's contract, honoured
    by the images of ``flavors`` only (upstream's 2023 images know no such header)."""

    header: str
    value: str = "{username}:{password}"  # {username} and {password}: the login account's
    flavors: tuple[str, ...] = Field(min_length=1)
    # What a request with a wrong value gets: 'guest' (served, not logged in: Magento's plugins log a
    # warning) or 'refused' (HTTP 401 on every such request: Postmill's authenticator).
    wrong: Literal["guest", "refused"] = "guest"

    @field_validator("header")
    @classmethod
    def _header(cls, v: str) -> str:
        if not _HEADER_NAME.match(v):
            raise ValueError(f"header {v!r}: expected an HTTP header name (letters, digits, '-')")
        return v

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        left = re.sub(r"\{(username|password)\}", "", v)
        if "{" in left or "}" in left or any(ord(c) < 32 or ord(c) == 127 for c in v):
            raise ValueError(f"value {v!r}: only {{username}} and {{password}} may be templated, no control characters")
        return v

    def render(self, account: "Account") -> str:
        return self.value.replace("{username}", account.username).replace("{password}", account.password)


class Probe(_Model):
    name: str
    kind: Literal["http", "login", "exec"] = "http"
    service: str | None = None  # default: entry service
    path: str = "/"
    expect_status: tuple[Annotated[int, Field(ge=100, le=599)], ...] = (200,)  # HTTP status codes
    expect_text: str | None = None
    expect_json_key: str | None = None
    same_host: bool = False  # the final URL (after redirects) stays on the public host:port
    follow_redirects: bool = True
    method: Literal["GET", "POST"] = "GET"
    json_body: dict[str, str] | None = None
    run: tuple[str, ...] | None = None  # kind=exec


class Health(_Model):
    timeout: float = Field(default=120, gt=0, le=86400)  # seconds, full flavor
    probes: tuple[Probe, ...] = Field(min_length=1)


class Query(_Model):
    name: str
    service: str | None = None
    run: tuple[str, ...]


class InPlace(_Model):
    """The spare-less tier: restore the databases inside the running copy.

    ``save`` runs once on every new copy while it is pristine (before a golden image is committed,
    so copies booted from the golden carry the saved state); ``restore`` puts the saved state back
    in the running copy. Both are argv steps like the configure steps, and idempotent."""

    save: tuple[Step, ...] = Field(min_length=1)
    restore: tuple[Step, ...] = Field(min_length=1)
    # Exit 0 when the copy holds saved state {state}. With it, a named snapshot is saved in place too (state
    # ``snap_<name>``), and 'snapshot restore' without a warm copy restores it inside the running copy when the copy
    # has it. ``{state}`` is ``pristine`` for the reset tier.
    has: tuple[Step, ...] = ()


class Reset(_Model):
    tier: Tier
    spares: int = Field(default=0, ge=0, le=8)
    endpoint: str | None = None  # tier=endpoint: path POSTed with the token
    success_text: str | None = None
    inplace: InPlace | None = None  # the tier after 'spare' when no spare is ready (and tier=inplace)


class Site(_Model):
    title: str
    benchmarks: tuple[Benchmark, ...] = Field(min_length=1)
    entry: str  # the service the site's URL points at
    services: dict[str, Service] = Field(min_length=1)
    depends_on: tuple[str, ...] = ()  # other sites that must be up first
    coupled_with: tuple[str, ...] = ()  # sites whose state this one's writes can change (run together)
    flavors: dict[str, Flavor]
    configure: tuple[Step, ...] = ()
    settings: dict[str, str] = Field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # setting names masked in output
    accounts: tuple[Account, ...] = ()
    login: Login | None = None
    header_login: HeaderLogin | None = None  # log in by request header, on the flavors it names
    health: Health
    env: dict[str, dict[str, str]] = Field(default_factory=dict)  # benchmark -> VAR -> template
    fingerprint: tuple[Query, ...] = ()
    # A cheap change signal, read from inside a copy: queries whose output moves whenever anything the fingerprint
    # covers may have changed, whatever path the change took (the database's own log position: PostgreSQL's WAL
    # LSN, InnoDB's log sequence number). Equal outputs mean the fingerprint need not run again; a site without it
    # is fingerprinted whenever it must be known pristine (docs/architecture.md, "Known, not assumed").
    changes: tuple[Query, ...] = ()
    reset: Reset
    url_path: str = ""  # appended to the public URL for humans (e.g. /forums/all)
    notes: tuple[str, ...] = ()
    # flavor -> what the site lacks or does differently on that flavor, against the upstream site the tasks
    # were written on (e.g. slim shopping_admin's disabled mass deletes); the site's, not the flavor's
    # (a flavor gives only images and artifacts); shown by 'envctl sites show'
    gaps: dict[str, tuple[str, ...]] = Field(default_factory=dict)

    @field_validator("services")
    @classmethod
    def _service_names(cls, v: dict[str, Service]) -> dict[str, Service]:
        return _names(v, "service name")

    @field_validator("flavors")
    @classmethod
    def _flavor_names(cls, v: dict[str, Flavor]) -> dict[str, Flavor]:
        return _names(v, "flavor name")

    @model_validator(mode="after")
    def _refs(self) -> "Site":
        if self.entry not in self.services:
            raise ValueError(f"entry '{self.entry}' is not one of the services ({', '.join(self.services)})")
        if self.services[self.entry].ports is None:
            raise ValueError(f"entry service '{self.entry}' needs ports")
        for name, svc in self.services.items():
            for dep in svc.depends_on:
                if dep not in self.services:
                    raise ValueError(f"service '{name}' depends on unknown service '{dep}'")
        for step in self.configure:
            if step.service and step.service not in self.services:
                raise ValueError(f"configure step names unknown service '{step.service}'")
        if self.login and self.login.account not in {a.username for a in self.accounts}:
            raise ValueError(f"login.account '{self.login.account}' is not in accounts")
        if self.header_login and not self.login:
            raise ValueError("header_login needs a login (its account is the one the header logs in)")
        for f in self.header_login.flavors if self.header_login else ():
            if f not in self.flavors:
                raise ValueError(f"header_login.flavors: the site has no flavor '{f}' (it has {', '.join(self.flavors)})")
        for env in self.env:
            if env not in ("webarena", "visualwebarena"):
                raise ValueError(f"env has unknown benchmark '{env}' (expected webarena or visualwebarena)")
        for sname, svc in self.services.items():
            for fname in svc.flavors:
                if fname not in self.flavors:
                    raise ValueError(f"services.{sname}.flavors.{fname}: the site has no flavor '{fname}' "
                                     f"(it has {', '.join(self.flavors) or 'none'}); add '{fname}' under the site's "
                                     "'flavors' (description, artifacts) or remove this entry")
        for other in (self.login.no_pair_with if self.login else ()):
            if other == self.entry:
                raise ValueError("login.no_pair_with names the site itself")
        if self.changes and not self.fingerprint:
            raise ValueError("changes (a change signal) needs fingerprint queries: the signal only says when to run them")
        for q in (*self.fingerprint, *self.changes):
            if q.service and q.service not in self.services:
                raise ValueError(f"query '{q.name}' names unknown service '{q.service}'")
        if self.reset.tier == "endpoint" and not self.reset.endpoint:
            raise ValueError("reset tier 'endpoint' needs reset.endpoint")
        if self.reset.tier == "inplace" and not self.reset.inplace:
            raise ValueError("reset tier 'inplace' needs reset.inplace (save and restore steps)")
        for step in (*self.reset.inplace.save, *self.reset.inplace.restore, *self.reset.inplace.has) \
                if self.reset.inplace else ():
            if step.service and step.service not in self.services:
                raise ValueError(f"reset.inplace step names unknown service '{step.service}'")
        problem = self._contract_problem()
        if problem:
            raise ValueError(problem)
        return self

    def contract_services(self) -> dict[str, str]:
        """{service: why} for every service the site's contract names: those with public ports (the
        entry among them), and those its probes, fingerprint queries, configure and in-place steps run
        in. Each must exist on every flavor, so the contract is the same wherever the site runs."""
        named: dict[str, str] = {}
        for name, svc in self.services.items():
            if svc.ports:
                named.setdefault(name, f"public port {svc.ports.public}")
        named.setdefault(self.entry, "the entry service")
        for p in self.health.probes:
            named.setdefault(p.service or self.entry, f"health probe '{p.name}'")
        for q in self.fingerprint:
            named.setdefault(q.service or self.entry, f"fingerprint query '{q.name}'")
        for q in self.changes:
            named.setdefault(q.service or self.entry, f"change signal '{q.name}'")
        inplace = (*self.reset.inplace.save, *self.reset.inplace.restore, *self.reset.inplace.has) \
            if self.reset.inplace else ()
        for i, step in enumerate(self.configure):
            named.setdefault(step.service or self.entry, f"configure step {i + 1}")
        for step in inplace:
            named.setdefault(step.service or self.entry, "a reset.inplace step")
        return named

    def _contract_problem(self) -> str | None:
        """The first service of the contract missing from a flavor (docs/architecture.md, "Flavors")."""
        for f in self.gaps:
            if f not in self.flavors:
                return f"gaps.{f}: the site has no flavor '{f}' (it has {', '.join(self.flavors)})"
        for sname, why in self.contract_services().items():
            if sname not in self.services:
                continue  # an unknown service: reported by the checks that name it (probes are checked below)
            missing = [f for f in self.flavors if f not in self.services[sname].flavors]
            if missing:
                return (f"services.{sname}.flavors: no entry for flavor '{missing[0]}', but {why} is the site's "
                        f"contract on every flavor; give '{sname}' an image for '{missing[0]}' (a flavor changes "
                        "images, not the contract)")
        return None

    # -- convenience --------------------------------------------------------------------------
    @property
    def entry_service(self) -> Service:
        return self.services[self.entry]

    def public_ports(self) -> dict[str, int]:
        return {n: s.ports.public for n, s in self.services.items() if s.ports}

    def services_for(self, flavor: str) -> list[str]:
        """The services that exist in ``flavor``, dependencies first."""
        return [n for n in self.service_order() if flavor in self.services[n].flavors]

    def account(self) -> Account | None:
        if not self.login:
            return self.accounts[0] if self.accounts else None
        return next(a for a in self.accounts if a.username == self.login.account)

    def header_on(self, flavor: str) -> HeaderLogin | None:
        """The site's header login when ``flavor``'s images honour it, else None."""
        h = self.header_login
        return h if h is not None and flavor in h.flavors else None

    def steps(self, flavor: str) -> tuple[Step, ...]:
        """The configure steps ``flavor`` runs: the site's, on every flavor."""
        return self.configure

    def fingerprint_queries(self, flavor: str) -> tuple[Query, ...]:
        """The fingerprint queries of ``flavor``: the site's, on every flavor."""
        return self.fingerprint

    def service_order(self) -> list[str]:
        """Services in dependency order (dependencies first)."""
        return dependency_order(list(self.services), lambda n: self.services[n].depends_on)


class ResetServer(_Model):
    port: int = Field(default=7565, ge=1, le=65535)  # BrowserGym's WA_FULL_RESET server


class Catalog(_Model):
    version: Literal[1]
    reset_server: ResetServer = ResetServer()
    sites: dict[str, Site] = Field(min_length=1)

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, v: Any) -> Any:
        if isinstance(v, bool):  # YAML's true is an int (== 1) in Python
            raise ValueError(f"expected 1 (got {v!r})")
        return v

    @field_validator("sites")
    @classmethod
    def _site_names(cls, v: dict[str, Site]) -> dict[str, Site]:
        return _names(v, "site name")

    @model_validator(mode="after")
    def _cross(self) -> "Catalog":
        problems = []
        # 'envctl serve' listens on reset_server.port by default: no site may publish it too.
        seen: dict[int, str] = {self.reset_server.port: "reset_server.port"}
        for name, site in self.sites.items():
            for dep in site.depends_on:
                if dep not in self.sites:
                    problems.append(f"sites.{name}.depends_on: unknown site '{dep}'")
            for other in site.coupled_with:
                if other not in self.sites:
                    problems.append(f"sites.{name}.coupled_with: unknown site '{other}'")
            for other in (site.login.no_pair_with if site.login else ()):
                if other not in self.sites:
                    problems.append(f"sites.{name}.login.no_pair_with: unknown site '{other}'")
            for where, text in _strings(site.model_dump(), f"sites.{name}"):
                for ref in re.findall(r"\{sites\.([a-z0-9_]+)\.public_url\}", text):
                    if ref not in self.sites:
                        problems.append(f"{where}: unknown site '{ref}' in template")
                for ref in re.findall(r"\{service(?:_url|_port)?\.([a-z0-9_]+)\}", text):
                    if ref not in site.services:
                        problems.append(f"{where}: unknown service '{ref}' in template")
                for ref in re.findall(r"\{setting\.([a-z0-9_]+)\}", text):
                    if ref not in site.settings:
                        problems.append(f"{where}: unknown setting '{ref}' in template")
            for svc, port in site.public_ports().items():
                where = f"{name}.{svc}"
                if port in seen:
                    problems.append(f"sites.{name}.services.{svc}.ports.public: port {port} is also used by {seen[port]}")
                seen[port] = where
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def site(self, name: str) -> Site:
        try:
            return self.sites[name]
        except KeyError:
            raise UnknownSite(name, self.sites) from None

    def resolve(self, names: list[str] | tuple[str, ...] | None, *, all_sites: bool = False,
                benchmark: str | None = None) -> list[str]:
        """Validated site names plus their dependencies, dependencies first."""
        if all_sites or not names:
            wanted = [n for n, s in self.sites.items() if benchmark is None or benchmark in s.benchmarks]
        else:
            wanted = [n for n in names if self.site(n)]
        return dependency_order(wanted, lambda n: self.sites[n].depends_on)

    def flavors(self) -> list[str]:
        return sorted({f for s in self.sites.values() for f in s.flavors})

    def mirrors(self) -> list[str]:
        """Every mirror name any artifact lists (what 'images get --mirror' accepts)."""
        return sorted({src.mirror for s in self.sites.values() for f in s.flavors.values()
                       for a in f.artifacts for src in a.sources})

    def placeholders(self) -> dict[str, str]:
        """Task-config placeholders (``__SHOPPING_ADMIN__``) -> the harness variable each stands for:
        one per site, its first WebArena (else VisualWebArena) variable. Longest first, so that
        plain string replacement never cuts ``__SHOPPING__`` out of ``__SHOPPING_ADMIN__``."""
        out = {}
        for name, s in self.sites.items():
            names = list(s.env.get("webarena") or s.env.get("visualwebarena") or {})
            if names:
                out[f"__{name.upper()}__"] = names[0]
        return dict(sorted(out.items(), key=lambda kv: -len(kv[0])))

    def coupled(self) -> list[tuple[str, str]]:
        """Pairs of sites whose state is coupled (one may change the other's), from ``coupled_with``."""
        return [(other, name) for name, s in self.sites.items() for other in s.coupled_with]

    def account_with_role(self, role: str) -> Account | None:
        return next((a for s in self.sites.values() for a in s.accounts if a.role == role), None)

    def require_flavor(self, sites: Iterable[str], flavor: str) -> None:
        """Each named site has ``flavor``: else one line naming the flavors it has (a site named on the
        command line is never left out silently; dependencies and '--all' keep only the sites that have it)."""
        for name in sites:
            have = list(self.site(name).flavors)
            if flavor not in have:
                raise UsageError(f"site '{name}' has no flavor '{flavor}' (it has {', '.join(have)})",
                                 f"leave it out, or run it with --flavor {have[0]} under another --instance")

    def images_of(self, site: str, flavor: str) -> list[str]:
        s = self.site(site)
        if flavor not in s.flavors:
            raise UsageError(f"site '{site}' has no flavor '{flavor}'", f"choose one of {', '.join(s.flavors)}")
        return [s.services[svc].flavors[flavor].image for svc in s.services_for(flavor)]

    def summary(self) -> list[dict[str, Any]]:
        """One row per site: ports, flavors, benchmarks, reset tier, login account."""
        return [{"site": name, "title": s.title, "benchmarks": list(s.benchmarks), "ports": s.public_ports(),
                 "flavors": list(s.flavors), "reset": s.reset.tier, "login": s.login.account if s.login else None}
                for name, s in self.sites.items()]





def _strings(obj: Any, path: str) -> list[tuple[str, str]]:
    """Every string in a dumped model with its dotted path (for template reference checks)."""
    if isinstance(obj, str):
        return [(path, obj)]
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in _strings(v, f"{path}.{k}")]
    if isinstance(obj, (list, tuple)):
        return [x for i, v in enumerate(obj) for x in _strings(v, f"{path}[{i}]")]
    return []


Flavor.model_rebuild()
