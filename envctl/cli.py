"""envctl command line: thin Click commands that call the library (``envctl.Lab`` and the public
``envctl.images`` / ``envctl.cloud`` / ``envctl.smoke`` APIs) and render the result.

Errors are handled once, at the root group: every ``EnvctlError`` becomes one line
``error: ... ; hint`` and its exit code (1 runtime, 2 usage); anything unexpected prints one line
and writes the traceback to a debug log. ``--instance``, ``--flavor`` and ``--json`` are declared
once below and shared by every command that takes them.
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from envctl import __version__
from envctl.errors import EnvctlError, UsageError

if TYPE_CHECKING:
    from envctl.catalog import Catalog
    from envctl.lab import Lab


class Ctx:
    """Built once in the root group; commands receive it with ``pass_ctx``."""

    def __init__(self, catalog_path: str | None) -> None:
        self.catalog_path = catalog_path
        self._catalog: Catalog | None = None

    @property
    def catalog(self) -> "Catalog":  # lazy, so --help and --version never parse YAML
        if self._catalog is None:
            from envctl.catalog import load_catalog

            self._catalog = load_catalog(self.catalog_path)
        return self._catalog

    def lab(self, instance: str = "default", auth_dir: str | None = None) -> "Lab":
        from envctl.lab import Lab

        return Lab(self.catalog, catalog_path=self.catalog_path, instance=instance, auth_dir=auth_dir)


pass_ctx = click.make_pass_decorator(Ctx)


class EnvctlGroup(click.Group):
    """The one boundary where errors become one line on stderr and an exit code (1 runtime, 2 usage)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            super().main(*args, **kwargs)
        except click.ClickException as exc:  # usage errors: one line, not click's three
            cmd = exc.ctx.command_path if isinstance(exc, click.UsageError) and exc.ctx else "envctl"
            click.echo(f"error: {exc.format_message()} (see '{cmd} --help')", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(0)

    def invoke(self, ctx: click.Context) -> Any:
        rest = [*getattr(ctx, "_protected_args", ()), *ctx.args]  # the subcommand's words, before they are parsed
        ctx.meta["envctl.help"] = bool({"-h", "--help"} & set(rest))
        try:
            return super().invoke(ctx)
        except EnvctlError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted; nothing half-done is kept as ready — run the command again to finish", err=True)
            sys.exit(130)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the one boundary for unexpected errors
            if "Cannot connect to the Docker daemon" in str(exc):  # the engine went away mid-command
                click.echo("error: the Docker engine stopped answering; start it (sudo scripts/docker-engine.sh) "
                           "and run the command again: the next command repairs what was half-done", err=True)
                sys.exit(1)
            from envctl.locks import write_debug_log

            log = write_debug_log(traceback.format_exc())  # <state dir>/debug.log, 0600, no symlinks
            where = f"traceback in {log}" if log else "no debug log could be written"
            click.echo(f"error: unexpected {type(exc).__name__}: {exc} ({where}; please report it)", err=True)
            sys.exit(1)


# -- shared options ----------------------------------------------------------------------------------
def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="machine-readable output")(fn)


def _check_instance(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from envctl.validate import validate_instance_name

    try:
        return validate_instance_name(value)
    except UsageError as exc:
        raise click.BadParameter(str(exc)) from None


def instance_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--instance", "-i", default=lambda: os.environ.get("ENVCTL_INSTANCE", "default"),
                        show_default="default", callback=_check_instance,
                        help="instance name (ENVCTL_INSTANCE)")(fn)


def _check_flavor(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    known = ctx.find_object(Ctx).catalog.flavors()  # type: ignore[union-attr]
    if value not in known:
        raise click.BadParameter(f"unknown flavor '{value}'; choose one of {', '.join(known)}")
    return value


def flavor_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--flavor", default=None, callback=_check_flavor,
                        help="full (upstream images) or mini (envctl's stand-ins) [full, or the running instance's]"
                        )(fn)


def _finite(_ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """click.FloatRange lets NaN through (every comparison with it is False)."""
    if value is not None and value != value:
        raise click.BadParameter(f"{value} is not a number")
    return value


def _check_region(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--region / $AWS_REGION: a region name, checked before any AWS call (names the variable when it came from it)."""
    from envctl.validate import validate_region

    if value is None:
        return None
    source = ctx.get_parameter_source(param.name or "region")
    return validate_region(value, "AWS_REGION" if source == click.core.ParameterSource.ENVIRONMENT else "--region")


def auth_dir_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--auth-dir", default=None, help="where login state files go [.auth]")(fn)


def sites_argument(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.argument("site_names", nargs=-1, metavar="[SITE]...")(fn)


def _sites(ctx: Ctx, names: tuple[str, ...]) -> list[str] | None:
    """Named sites, checked against the catalog (a typo is a usage error with a suggestion)."""
    return ctx.catalog.resolve(list(names)) if names else None


def _exit_unless(ok: bool) -> None:
    if not ok:
        sys.exit(1)


@click.group(cls=EnvctlGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envctl")
@click.option("--catalog", type=click.Path(dir_okay=False), envvar="ENVCTL_CATALOG",
              help="site catalog YAML (default: the built-in one; env ENVCTL_CATALOG)")
@click.pass_context
def cli(ctx: click.Context, catalog: str | None) -> None:
    """Provision, reset and verify the WebArena / VisualWebArena sites for web-agent evaluation."""
    ctx.obj = Ctx(catalog)
    # garbage in an ENVCTL_* variable, or a state/data directory that is a file, is refused here in one
    # line before anything runs; 'doctor' reports every variable instead, and help is always shown
    if ctx.invoked_subcommand != "doctor" and not ctx.meta.get("envctl.help"):
        from envctl.locks import check_environment

        check_environment()


# -- sites ---------------------------------------------------------------------------------------
@cli.group()
def sites() -> None:
    """What the catalog knows about each site."""


@sites.command("list")
@json_option
@pass_ctx
def sites_list(ctx: Ctx, as_json: bool) -> None:
    """Every site with its ports, flavors, benchmarks and reset tier."""
    from envctl.render import emit_json, table

    rows = ctx.catalog.summary()
    if as_json:
        return emit_json(rows)
    table(None, ["site", "title", "ports", "flavors", "benchmarks", "reset", "login"],
          [[r["site"], r["title"], ", ".join(f"{k}:{v}" if len(r["ports"]) > 1 else str(v) for k, v in r["ports"].items()),
            ",".join(r["flavors"]), ",".join(r["benchmarks"]), r["reset"], r["login"] or "-"] for r in rows])


@sites.command("show")
@click.argument("site")
@json_option
@pass_ctx
def sites_show(ctx: Ctx, site: str, as_json: bool) -> None:
    """Everything the catalog knows about SITE (passwords and secrets masked)."""
    import yaml

    from envctl.render import console, emit_json

    data = ctx.catalog.describe(site)
    if as_json:
        return emit_json(data)
    console.print(yaml.safe_dump({site: data}, sort_keys=False, width=110))


# -- doctor --------------------------------------------------------------------------------------
@cli.command()
@sites_argument
@flavor_option
@click.option("--port-offset", type=click.IntRange(0, 60000), default=0)
@click.option("--bind", default="127.0.0.1", show_default=True)
@json_option
@pass_ctx
def doctor(ctx: Ctx, site_names: tuple[str, ...], flavor: str | None, port_offset: int, bind: str,
           as_json: bool) -> None:
    """Check this machine for 'envctl up': engine, storage driver, disk, RAM, ports, images, browser."""
    from envctl.doctor import run_doctor
    from envctl.render import emit_json, table
    from envctl.validate import validate_host, validate_port_offset

    names = _sites(ctx, site_names)
    validate_host(bind, "--bind")
    validate_port_offset(port_offset, [p for n in ctx.catalog.resolve(names) for p in ctx.catalog.site(n).public_ports().values()])
    report = run_doctor(ctx.catalog, names, flavor=flavor or "full", port_offset=port_offset,
                        bind=bind)
    if as_json:
        emit_json(report)
    else:
        table(None, ["check", "status", "detail", "fix"],
              [[c["check"], {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}[c["status"]],
                c["detail"], c.get("fix") or ""] for c in report["checks"]])
    _exit_unless(report["ok"])


# -- plan ----------------------------------------------------------------------------------------
@cli.command("plan")
@sites_argument
@flavor_option
@click.option("--memory", "memory", default=None, help="plan for a host with this much memory (e.g. 64g) [this host]")
@json_option
@pass_ctx
def plan_cmd(ctx: Ctx, site_names: tuple[str, ...], flavor: str | None, memory: str | None, as_json: bool) -> None:
    """How many pristine spares per site fit this host (what 'envctl up' boots by default)."""
    from envctl.plan import plan
    from envctl.render import emit_json, table
    from envctl.validate import validate_memory_size

    flavor = flavor or "full"
    if flavor not in ctx.catalog.flavors():
        raise UsageError(f"unknown flavor '{flavor}'", f"choose one of {', '.join(ctx.catalog.flavors())}")
    host_bytes = validate_memory_size(memory, "--memory") if memory is not None else None  # 0, -1g, inf: one line
    names = [n for n in ctx.catalog.resolve(list(site_names), all_sites=not site_names)
             if flavor in ctx.catalog.site(n).flavors]
    from envctl.plan import measure_engine

    try:  # what running copies of these sites really use on this engine (a copy is counted by it)
        engine = measure_engine()
        measured = engine.site_use(flavor)
    except EnvctlError:
        engine, measured = None, {}
    p = plan(ctx.catalog, names, flavor, host_bytes, measured=measured)
    if as_json:
        emit_json({**p.to_dict(), "applied_by_up": True,
                   "engine_used_bytes": engine.used_bytes if engine else None})
        return
    gb = lambda n: f"{n / (1 << 30):.1f} GiB"  # noqa: E731
    mb = lambda n: f"{n / (1 << 20):.0f} MiB" if n is not None else "-"  # noqa: E731
    table(f"{flavor} flavor on {gb(p.host_bytes)} (budget {gb(p.budget_bytes)}, planned {gb(p.used_bytes)})",
          ["site", "copy limit", "measured", f"counted (x{p.margin:g})", "spares wanted", "spares that fit"],
          [[s.site, gb(s.copy_bytes), mb(s.measured_bytes), mb(s.counted_bytes), s.wanted, s.spares]
           for s in p.sites])
    if not p.fits:
        click.echo("the active copies alone exceed the budget: start fewer sites at once, or use a larger host")
    click.echo("measured: the largest running active copy of the site on this engine (none: counted by its limits)"
               + (f"; the engine's containers use {gb(engine.used_bytes)} now" if engine else
                  "; the engine could not be read"))
    click.echo("'envctl up' also counts what other instances on the engine use (measured the same way)")
    click.echo("'envctl up' boots these spares by default ('--spares K' asks for K per site instead)")


# -- images --------------------------------------------------------------------------------------
@cli.group()
def images() -> None:
    """Get, build, verify and move the sites' images."""


@images.command("build")
@sites_argument
@flavor_option
@json_option
@pass_ctx
def images_build(ctx: Ctx, site_names: tuple[str, ...], flavor: str | None, as_json: bool) -> None:
    """Build the images envctl makes itself: the mini flavor's [default], the homepage, the front proxy."""
    from envctl.images import build_for_sites
    from envctl.render import emit_json, err_console

    names = ctx.catalog.resolve(list(site_names) or None)
    times = build_for_sites(ctx.catalog, names, flavor or "mini",
                            progress=None if as_json else (lambda m: err_console.print(m)))
    if as_json:
        emit_json({"built": {k: round(v, 2) for k, v in times.items()}})


@images.command("list")
@sites_argument
@flavor_option
@json_option
@pass_ctx
def images_list(ctx: Ctx, site_names: tuple[str, ...], flavor: str | None, as_json: bool) -> None:
    """Per site: every artifact, its sources, expected size, whether it is present, its pinned sha256."""
    from envctl.images import list_images
    from envctl.render import emit_json, table

    flavor = flavor or "full"
    rows = list_images(ctx.catalog, sites=ctx.catalog.resolve(list(site_names) or None), flavor=flavor)
    if as_json:
        return emit_json([asdict(r) for r in rows])
    table(f"{flavor} flavor artifacts", ["site", "artifact", "kind", "size", "present", "sha256", "sources"],
          [[r.site, r.name, r.kind, f"{r.size / 1e9:.1f} GB" if r.size else "?", "yes" if r.present else "no",
            (r.sha256 or "")[:12] or "-", ", ".join(src.split(" ")[0] for src in r.sources)]
           for r in rows])


@images.command("get")
@sites_argument
@click.option("--all", "all_sites", is_flag=True)
@flavor_option
@click.option("--mirror", default=None, help="use only this mirror (e.g. cmu, archive.org, gdrive)")
@click.option("--keep-archive", is_flag=True, help="keep the downloaded tarball (resumable) instead of streaming it")
@click.option("--jobs", type=click.IntRange(1, 16), default=1, show_default=True, help="artifacts fetched in parallel")
@click.option("--registry-mirror", default=None, envvar="ENVCTL_REGISTRY_MIRROR",
              help="pull registry images through this mirror (host[:port][/prefix]); ENVCTL_REGISTRY_MIRROR")
@click.option("--dry-run", is_flag=True, help="fetch nothing: list each artifact's reference, size, digest, and the disk check")
@instance_option
@json_option
@pass_ctx
def images_get(ctx: Ctx, site_names: tuple[str, ...], all_sites: bool, flavor: str | None, mirror: str | None,
               keep_archive: bool, jobs: int, registry_mirror: str | None, dry_run: bool, instance: str,
               as_json: bool) -> None:
    """Fetch missing images and data: registry, then tarball mirrors; resumable, verified, streamed, unpacked
    (data volumes are the instance's own)."""
    from envctl.images import Options, get_images
    from envctl.render import TransferProgress, emit_json, table

    if site_names and all_sites:
        raise UsageError("name sites or pass --all, not both", "e.g. 'envctl images get shopping' or '--all'")
    names = ctx.catalog.resolve(list(site_names) or None, all_sites=all_sites)
    ctx.catalog.require_flavor(site_names, flavor or "full")
    if mirror is not None:
        known = ctx.catalog.mirrors()
        if mirror not in known:
            raise UsageError(f"unknown mirror '{mirror}'", f"choose one of {', '.join(known)}")
    if registry_mirror is not None:
        from envctl.validate import validate_registry_mirror

        validate_registry_mirror(registry_mirror)
    if dry_run:
        return _images_get_plan(ctx, names, flavor or "full", mirror, keep_archive, registry_mirror, instance, as_json)
    with TransferProgress(json_events=as_json) as progress:
        results = get_images(ctx.catalog, names, flavor=flavor or "full", mirror=mirror, keep_archive=keep_archive,
                             jobs=jobs, progress=progress,
                             options=Options(instance=instance, registry_mirror=registry_mirror))
    if as_json:
        emit_json([asdict(r) for r in results])
    else:
        table(None, ["site", "artifact", "result", "detail"],
              [[r.site, r.name, r.action, (r.error or "")[:100]] for r in results])
    _exit_unless(not any(r.action == "failed" for r in results))


def _images_get_plan(ctx: Ctx, names: list[str], flavor: str, mirror: str | None, keep_archive: bool,
                     registry_mirror: str | None, instance: str, as_json: bool) -> None:
    from envctl.images import Options, plan_get
    from envctl.render import emit_json, table

    plan = plan_get(ctx.catalog, names, flavor=flavor, mirror=mirror, keep_archive=keep_archive,
                    options=Options(instance=instance, registry_mirror=registry_mirror))
    if as_json:
        emit_json({"flavor": plan.flavor, "artifacts": [asdict(a) for a in plan.artifacts], "disk": plan.disk})
    else:
        gb = lambda n: f"{n / 1e9:.1f} GB" if n else "?"  # noqa: E731
        table(f"images get --flavor {flavor} (dry run: nothing fetched)",
              ["site", "artifact", "action", "reference", "size", "loaded", "pinned"],
              [[a.site, a.name, a.action, a.reference or "-", gb(a.size), gb(a.loaded_size),
                a.digest.split("@")[-1][:19] if a.digest else
                ("sha256, catalog" if a.pinned_in == "catalog" else "sha256, lock") if a.pinned_in else "by the first get"]
               for a in plan.artifacts])
        for d in plan.disk:
            click.echo(f"{d['path']}: needs {d['need'] / 1e9:.1f} GB, {d['free'] / 1e9:.1f} GB free"
                       f"{'' if d['ok'] else ' - NOT ENOUGH'}")
    _exit_unless(plan.fits)


@images.command("verify")
@sites_argument
@flavor_option
@instance_option
@json_option
@pass_ctx
def images_verify(ctx: Ctx, site_names: tuple[str, ...], flavor: str | None, instance: str, as_json: bool) -> None:
    """Re-check present artifacts against their pins (size, sha256, registry digest) and their extracts."""
    from envctl.images import Options, verify_images
    from envctl.render import emit_json, table

    res = verify_images(ctx.catalog, ctx.catalog.resolve(list(site_names) or None), flavor=flavor or "full",
                        options=Options(instance=instance))
    if as_json:
        emit_json([asdict(r) for r in res])
    else:
        table(None, ["site", "artifact", "ok", "detail"], [[r.site, r.name, "ok" if r.ok else "FAIL", r.detail] for r in res])
    _exit_unless(all(r.ok for r in res))


@images.command("export")
@click.argument("site")
@click.argument("file", type=click.Path(dir_okay=False))
@flavor_option
@json_option
@pass_ctx
def images_export(ctx: Ctx, site: str, file: str, flavor: str | None, as_json: bool) -> None:
    """Save SITE's image(s) to FILE (plus FILE.sha256) to move them to another host."""
    from envctl.images import export_image
    from envctl.locks import output_file
    from envctl.render import emit_json

    tag = ctx.catalog.images_of(site, flavor or "full")[0]
    output_file(file, "FILE")  # a directory, a FIFO, or under a regular file: one line before Docker is asked
    output_file(f"{file}.sha256", "FILE.sha256")
    out = export_image(tag, Path(file))
    if as_json:
        return emit_json(asdict(out))
    click.echo(f"exported {tag} to {out.path} ({out.size / 1e6:.1f} MB, sha256 {out.sha256[:12]})")


@images.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--tag", default=None, help="tag to give the loaded image")
@json_option
def images_import(file: str, tag: str | None, as_json: bool) -> None:
    """Load an image file written by 'images export' (checked against FILE.sha256 when present)."""
    from envctl.images import import_image
    from envctl.render import emit_json
    from envctl.validate import validate_image_ref

    if tag is not None:
        validate_image_ref(tag, "--tag")
    res = import_image(Path(file), tag=tag)
    if as_json:
        return emit_json(asdict(res))
    click.echo(f"loaded {', '.join(res.tags) or res.image_id}")


@images.command("prune")
@click.option("--dry-run", is_flag=True)
@json_option
def images_prune(dry_run: bool, as_json: bool) -> None:
    """Remove envctl's partial downloads and the dangling images it made."""
    from envctl.images import prune
    from envctl.render import emit_json

    res = prune(dry_run=dry_run)
    if as_json:
        return emit_json(asdict(res))
    click.echo(f"{'would remove' if dry_run else 'removed'} {len(res.files)} files ({res.freed / 1e6:.1f} MB) "
               f"and {len(res.images)} images")


# -- lifecycle -----------------------------------------------------------------------------------
@cli.command()
@sites_argument
@click.option("--all", "all_sites", is_flag=True, help="every site of the catalog (the default)")
@flavor_option
@instance_option
@click.option("--public-host", default=None, help="host name the browser and harness use [127.0.0.1]")
@click.option("--bind", default=None, help="address the public ports bind to [127.0.0.1]")
@click.option("--port-offset", type=click.IntRange(0, 60000), default=None, help="add N to every public port [0]")
@click.option("--no-wait", is_flag=True, help="do not wait for health probes")
@click.option("--login/--no-login", default=True, show_default=True, help="seed login state files when healthy")
@auth_dir_option
@click.option("--spares", type=click.IntRange(0, 8), default=None,
              help="pre-boot K pristine spares per site for ~1 s resets (booted in the background)")
@json_option
@pass_ctx
def up(ctx: Ctx, site_names: tuple[str, ...], all_sites: bool, flavor: str | None, instance: str,
       public_host: str | None, bind: str | None, port_offset: int | None, no_wait: bool, login: bool,
       auth_dir: str | None, spares: int | None, as_json: bool) -> None:
    """Start sites (all by default), configure them and wait until every one is healthy."""
    from envctl.render import SiteProgress, emit_json, table

    if site_names and all_sites:
        raise click.UsageError("name sites or pass --all, not both")
    lab = ctx.lab(instance, auth_dir)
    with SiteProgress(json_events=as_json) as progress:
        result = lab.up(list(site_names), all_sites=all_sites or not site_names, flavor=flavor,
                        public_host=public_host, bind=bind, port_offset=port_offset, wait=not no_wait, login=login,
                        spares=spares, progress=progress)
    if as_json:
        emit_json(result.to_dict())
    else:
        table(f"instance {result.instance} ({result.flavor}) in {result.seconds:.1f}s",
              ["site", "url", "state", "create", "boot", "configure", "healthy"],
              [[s.site, s.url, "[green]healthy[/]" if s.ok else f"[red]{s.action}[/]",
                *(f"{s.timings[k]:.1f}s" if k in s.timings else "-" for k in ("create", "boot", "configure", "healthy"))]
               for s in result.sites])
        for s in result.sites:
            if not s.ok:
                click.echo(f"error: {s.site}: {s.error}", err=True)
        if result.login_error:
            click.echo(f"error: login state: {result.login_error}", err=True)
        elif result.login_files:
            click.echo(f"login state: {len(result.login_files)} files in {lab.auth_dir}/", err=True)
        if result.spares:
            click.echo("spares (booting in the background): "
                       + ", ".join(f"{n} {k}" for n, k in result.spares.items()), err=True)
        for why in result.spares_short.values():  # the capacity plan gave a site fewer than it wants
            click.echo(f"fewer spares: {why}", err=True)
    _exit_unless(result.ok)


@cli.command()
@sites_argument
@instance_option
@click.option("--volumes", is_flag=True, help="also remove the instance's named volumes")
@json_option
@pass_ctx
def down(ctx: Ctx, site_names: tuple[str, ...], instance: str, volumes: bool, as_json: bool) -> None:
    """Stop and remove what envctl made for the instance (only that, found by label)."""
    from envctl.render import emit_json

    result = ctx.lab(instance).down(_sites(ctx, site_names), volumes=volumes)
    if as_json:
        return emit_json(result.to_dict())
    click.echo(f"removed {len(result.removed)} containers of instance '{instance}'")


@cli.command()
@instance_option
@json_option
@pass_ctx
def status(ctx: Ctx, instance: str, as_json: bool) -> None:
    """Per site: containers, roles, health (each probe with latency), URL, flavor, image, uptime."""
    from envctl.render import emit_json, table

    pool = _pool_leases(instance)
    lab = ctx.lab(instance)
    if pool is not None and lab.settings() is None:  # a lease pool's name: its members and their leases
        if as_json:
            return emit_json(pool)
        _show_pool(instance, pool)
        return
    st = lab.status()
    if as_json:
        emit_json({**st.to_dict(), **({"pool": pool} if pool is not None else {})})
        _exit_unless(st.healthy)
        return
    rows = []
    for s in st.sites:
        probes = " ".join(f"{p['name']}:{'ok' if p['ok'] else 'FAIL'}({p['latency_ms']:.0f}ms)" for p in s.probes)
        active = [c for c in s.containers if c.role == "active"]
        rows.append([s.site, s.url, "[green]healthy[/]" if s.healthy else "[red]unhealthy[/]", probes,
                     active[0].image if active else "-", f"{active[0].uptime_s:.0f}s" if active else "-",
                     f"{s.spares_ready}/{s.spares_wanted}" if s.spares_wanted or s.spares_note else s.spares_ready])
    table(f"instance {instance} ({st.flavor}, {st.public_host}, bind {st.bind})",
          ["site", "url", "health", "probes", "image", "uptime", "spares"], rows)
    for s in st.sites:
        if s.spares_note:  # the capacity plan gave it fewer spares than the catalog wants
            click.echo(f"fewer spares: {s.spares_note}")
    if st.lease:
        left = float(st.lease.get("expires", 0) or 0) - time.time()
        click.echo(f"lease: {st.lease.get('state')} in pool {st.lease.get('pool')}"
                   + (f", held by {st.lease.get('holder') or '?'} ({', '.join(st.lease.get('sites') or [])}), "
                      f"expires in {left:.0f}s" if st.lease.get("state") == "leased" else ""))
    if pool is not None:
        _show_pool(instance, pool)
    _exit_unless(st.healthy)


@cli.command()
@sites_argument
@instance_option
@click.option("--wait", is_flag=True, help="wait (up to each site's deadline) until healthy")
@json_option
@pass_ctx
def health(ctx: Ctx, site_names: tuple[str, ...], instance: str, wait: bool, as_json: bool) -> None:
    """Run the sites' health probes now."""
    from envctl.render import emit_json, table

    res = ctx.lab(instance).health(_sites(ctx, site_names), wait=wait)
    ok = all(p.ok for ps in res.values() for p in ps)
    if as_json:
        emit_json({"ok": ok, "sites": {k: [p.to_dict() for p in v] for k, v in res.items()}})
    else:
        table(None, ["site", "probe", "ok", "latency", "detail"],
              [[s, p.name, "ok" if p.ok else "[red]FAIL[/]", f"{p.latency_ms:.0f}ms", p.detail[:80]]
               for s, ps in res.items() for p in ps])
    _exit_unless(ok)


@cli.command("env")
@click.option("--format", "fmt", type=click.Choice(["shell", "dotenv", "json", "browsergym", "agentlab"]),
              default="shell", show_default=True)
@click.option("--benchmark", type=click.Choice(["webarena", "visualwebarena"]), default="webarena",
              show_default=True, help="which harness's names (shell/dotenv)")
@instance_option
@json_option
@pass_ctx
def env_cmd(ctx: Ctx, fmt: str, benchmark: str, instance: str, as_json: bool) -> None:
    """The URLs for harnesses, exactly as WebArena, VisualWebArena, BrowserGym or AgentLab expect them.

    With --json, shell/dotenv/browsergym print the same variables as one flat JSON object."""
    from envctl.envformat import format_env, values
    from envctl.render import emit_json

    lab = ctx.lab(instance)
    if fmt != "agentlab" and lab.settings() is None:
        raise EnvctlError(f"instance '{instance}' does not exist on this Docker engine",
                          "start it with 'envctl up', or see 'envctl instances'")
    if as_json and fmt in ("shell", "dotenv", "browsergym"):
        return emit_json(values(lab, fmt, benchmark))
    click.echo(format_env(lab, fmt, benchmark), nl=False)


@cli.command()
@json_option
@pass_ctx
def instances(ctx: Ctx, as_json: bool) -> None:
    """Every envctl instance on this engine with its URL set."""
    from envctl.lab import Lab
    from envctl.render import emit_json, table

    found = Lab.instances(ctx.catalog)
    if as_json:
        return emit_json([i.to_dict() for i in found])
    table(None, ["instance", "flavor", "state", "bind", "offset", "sites", "homepage"],
          [[i.instance, i.flavor, i.state, i.bind, i.port_offset, ",".join(i.sites),
            i.webarena.get("HOMEPAGE", "")] for i in found])


@cli.command()
@click.argument("site")
@click.option("--service", default=None, help="service of a multi-container site (e.g. db)")
@click.option("-f", "--follow", is_flag=True)
@click.option("--tail", type=click.IntRange(0, 1_000_000), default=100, show_default=True)
@instance_option
@pass_ctx
def logs(ctx: Ctx, site: str, service: str | None, follow: bool, tail: int, instance: str) -> None:
    """Logs of a site's active container."""
    lab = ctx.lab(instance)
    if follow:
        for chunk in lab.follow_logs(site, service=service):
            click.echo(chunk, nl=False)
    else:
        click.echo(lab.logs(site, service=service, tail=tail), nl=False)


@cli.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("site")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--service", default=None)
@instance_option
@pass_ctx
def exec_cmd(ctx: Ctx, site: str, argv: tuple[str, ...], service: str | None, instance: str) -> None:
    """Run a command in a site's active container: envctl exec shopping -- mysql -e 'SELECT 1'."""
    rc, out = ctx.lab(instance).exec(site, list(argv), service=service)
    click.echo(out)
    sys.exit(rc)


@cli.command()
@sites_argument
@click.option("--all", "all_sites", is_flag=True, help="every login site that is up (the default)")
@instance_option
@click.option("--out", "out", default=None, help="folder for the state files [.auth]")
@click.option("--check", "check_only", is_flag=True, help="validate existing files with the expiry probes; no login")
@click.option("--max-age", default=None, help="renew files older than this (90s, 30m, 12h, 2d); keep younger valid ones")
@json_option
@pass_ctx
def login(ctx: Ctx, site_names: tuple[str, ...], all_sites: bool, instance: str, out: str | None, check_only: bool,
          max_age: str | None, as_json: bool) -> None:
    """Log in with each site's benchmark account; write Playwright storage_state files named as upstream."""
    from envctl.render import emit_json, table

    if site_names and all_sites:
        raise click.UsageError("name sites or pass --all, not both")
    report = ctx.lab(instance).login_report(_sites(ctx, site_names), out=out, check_only=check_only, max_age=max_age)
    if as_json:
        emit_json(report.to_dict())
    else:
        table(None, ["file", "ok", "action", "seconds", "problem"],
              [[f.name, "[green]ok[/]" if f.ok else "[red]FAIL[/]", f.action, f"{f.seconds:.1f}", f.error]
               for f in report.files])
    _exit_unless(report.ok)


# -- state: reset, verify, snapshots, reset server ------------------------------------------------
@cli.command()
@sites_argument
@click.option("--all", "all_sites", is_flag=True, help="every site that is up")
@click.option("--tier", type=click.Choice(["spare", "inplace", "endpoint", "recreate", "none"]), default=None,
              help="start at this tier instead of the catalog's")
@click.option("--no-wait", is_flag=True, help="refuse instead of waiting when the site is being reset already")
@instance_option
@auth_dir_option
@json_option
@pass_ctx
def reset(ctx: Ctx, site_names: tuple[str, ...], all_sites: bool, tier: str | None, no_wait: bool, instance: str,
          auth_dir: str | None, as_json: bool) -> None:
    """Pristine state again (spare swap, app endpoint, recreate or none), verified by probes and fingerprint."""
    from envctl.render import SiteProgress, emit_json, table

    if not site_names and not all_sites:
        raise click.UsageError("name the sites to reset, or pass --all")
    if site_names and all_sites:
        raise click.UsageError("name sites or pass --all, not both")
    lab = ctx.lab(instance, auth_dir)
    with SiteProgress(json_events=as_json) as progress:
        results = lab.reset(list(site_names), all_sites=all_sites, tier=tier, wait=not no_wait, progress=progress)
    if as_json:
        emit_json([r.to_dict() for r in results])
    else:
        table(None, ["site", "ok", "tier", "total", "phases", "escalations"],
              [[r.site, "[green]ok[/]" if r.ok else "[red]FAILED[/]", r.tier, f"{r.seconds:.3f}s",
                " ".join(f"{k}={v:.3f}s" for k, v in r.phases.items()), "; ".join(r.escalations)] for r in results])
    _exit_unless(all(r.ok for r in results))


@cli.command("verify")
@click.argument("site")
@instance_option
@json_option
@pass_ctx
def verify_cmd(ctx: Ctx, site: str, instance: str, as_json: bool) -> None:
    """Compare SITE's live state with its pristine fingerprint and print what differs."""
    from envctl.render import emit_json

    res = ctx.lab(instance).verify(ctx.catalog.resolve([site])[0])
    if as_json:
        emit_json(res.to_dict())
    else:
        click.echo(f"{site}: {'pristine' if res.ok else 'DIFFERS'} (expected {str(res.expected)[:12]}, "
                   f"live {res.actual[:12]})")
        for line in res.differences:
            click.echo(f"  {line}")
    _exit_unless(res.ok)


@cli.group()
def snapshot() -> None:
    """Golden images and named snapshots of a site's state."""


class _SnapshotCreate(click.Command):
    """``snapshot create SITE NAME``: a second positional is the ``--name`` option (one parameter, two
    spellings: ``snapshot create SITE --name NAME`` keeps working)."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        return [*pieces, "[NAME]"]

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value = {o for p in self.params if isinstance(p, click.Option) and not p.is_flag for o in p.opts}
        options: list[str] = []
        positional: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--":
                positional += args[i + 1:]
                break
            if a.startswith("-") and a != "-":
                options.append(a)
                if a in takes_value and i + 1 < len(args):
                    options.append(args[i + 1])
                    i += 1
            else:
                positional.append(a)
            i += 1
        if len(positional) == 2:
            if any(o == "--name" or o.startswith("--name=") for o in options):
                raise click.UsageError("the snapshot's name is given twice (NAME and --name); give one", ctx)
            options += ["--name", positional.pop()]
        return super().parse_args(ctx, [*options, "--", *positional] if positional else options)


@snapshot.command("create", cls=_SnapshotCreate)
@click.argument("site")
@click.option("--name", default="golden", show_default=True, help="NAME: 'golden' (what resets return to) or any name")
@click.option("--warm", is_flag=True, help="also keep a verified copy booted from it, so a restore is a route swap")
@click.option("--clean-stop", is_flag=True, help="stop the site for the commit instead of freezing it")
@instance_option
@auth_dir_option
@json_option
@pass_ctx
def snapshot_create(ctx: Ctx, site: str, name: str, warm: bool, clean_stop: bool,
                    instance: str, auth_dir: str | None, as_json: bool) -> None:
    """Commit SITE's state (volumes included) as NAME while it keeps serving (frozen for the commit only)."""
    from envctl.render import emit_json

    import signal

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(143)  # unwinds, so a site frozen for the commit is unpaused

    signal.signal(signal.SIGTERM, stop)
    res = ctx.lab(instance, auth_dir).snapshot_create(ctx.catalog.resolve([site])[0], name, warm=warm,
                                                      clean_stop=clean_stop)
    if as_json:
        return emit_json(res.to_dict())
    how = ("site frozen for " + f"{res.timings.get('freeze', 0):.2f}s") if res.method == "freeze" else "clean stop"
    click.echo(f"snapshot '{name}' of {site}: {', '.join(res.images.values())} (fingerprint {res.fingerprint[:12]}; "
               f"{how}; {res.seconds:.1f}s" + (f"; warm copy {', '.join(res.warm)}" if res.warm else "") + ")")
    if res.note:
        click.echo(f"  {res.note}")


@snapshot.command("list")
@click.option("--site", default=None)
@instance_option
@json_option
@pass_ctx
def snapshot_list(ctx: Ctx, site: str | None, instance: str, as_json: bool) -> None:
    """Golden images and this instance's named snapshots."""
    from envctl.render import emit_json, table

    rows = ctx.lab(instance).snapshots(ctx.catalog.resolve([site])[0] if site else None)
    if as_json:
        return emit_json([asdict(r) for r in rows])
    table(None, ["site", "kind", "name", "service", "image", "public url", "fingerprint", "MB"],
          [[r.site, r.kind, r.name, r.service, r.image, r.public_url, r.fingerprint, r.size_mb] for r in rows])


@snapshot.command("restore")
@click.argument("site")
@click.argument("name")
@instance_option
@auth_dir_option
@json_option
@pass_ctx
def snapshot_restore(ctx: Ctx, site: str, name: str, instance: str, auth_dir: str | None, as_json: bool) -> None:
    """Make SITE's state the named snapshot's (its warm copy swapped in, else a new copy; verified)."""
    from envctl.render import emit_json

    res = ctx.lab(instance, auth_dir).snapshot_restore(ctx.catalog.resolve([site])[0], name)
    if as_json:
        return emit_json(res.to_dict())
    click.echo(f"{site} restored to '{name}' in {res.seconds:.2f}s ({res.method}; login files {res.login}; "
               + " ".join(f"{k}={v:.3f}s" for k, v in res.timings.items()) + ")")


@snapshot.command("rm")
@click.argument("name")
@click.option("--site", default=None)
@instance_option
@auth_dir_option
@json_option
@pass_ctx
def snapshot_rm(ctx: Ctx, name: str, site: str | None, instance: str, auth_dir: str | None, as_json: bool) -> None:
    """Remove a named snapshot with its warm copies (or, with NAME=golden, golden images)."""
    from envctl.render import emit_json

    removed = ctx.lab(instance, auth_dir).snapshot_remove(name, ctx.catalog.resolve([site])[0] if site else None)
    if as_json:
        return emit_json({"removed": removed})
    for tag in removed:
        click.echo(f"removed {tag}")


@snapshot.command("_warm", hidden=True)
@click.option("--site", required=True)
@instance_option
@auth_dir_option
@pass_ctx
def snapshot_warm(ctx: Ctx, site: str, instance: str, auth_dir: str | None) -> None:
    """Internal: remove replaced copies and boot the warm copies SITE's snapshots want (run detached by restore)."""
    import signal
    import time as _t

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(143)  # unwinds: the copy being booted is removed ('envctl down' sends this)

    signal.signal(signal.SIGTERM, stop)
    site = ctx.catalog.resolve([site])[0]
    t = _t.monotonic()
    slots = ctx.lab(instance, auth_dir).snapshot_warm(site, progress=lambda s, p, d: click.echo(f"[{s}] {p}: {d}"))
    click.echo(f"[{site}] booted {len(slots)} warm copies in {_t.monotonic() - t:.1f}s")


@cli.command()
@click.option("--host", "--bind", "host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="[the catalog's reset_server.port: 7565]")
@click.option("--port-offset", type=click.IntRange(0, 60000), default=0,
              help="added to --port (one server per instance on a host)")
@click.option("--token", default=None, envvar="ENVCTL_SERVE_TOKEN",
              help="required as http://host:port/<token>/... or 'Authorization: Bearer'; generated into "
                   "<state dir>/serve-<instance>.token when --bind is not loopback (ENVCTL_SERVE_TOKEN)")
@click.option("--instances", default=None, metavar="N|auto",
              help="hand out leases on a pool of N instances <instance>-1..N (brought up or finished when not "
                   "running); 'auto': as many as the capacity plan fits in this host's memory")
@flavor_option
@click.option("--sites", "pool_sites", default=None, help="comma-separated sites of the pool's instances [all]")
@click.option("--spares", type=click.IntRange(0, 8), default=None, help="spares per site on the pool's instances")
@click.option("--heal-after", type=click.FloatRange(1, 86400), default=60.0, show_default=True, callback=_finite,
              help="seconds a site may fail its probes before it is replaced")
@click.option("--max-lease", type=click.FloatRange(1, 7 * 24 * 3600), default=None, callback=_finite,
              help="reclaim (and reset) a lease held longer than this many seconds, even while it heartbeats "
                   "(a hung episode); a lease's own max_seconds may only be shorter")
@click.option("--base-offset", type=click.IntRange(0, 60000), default=10000, show_default=True,
              help="the pool's instances get free port offsets from here, in steps of 1000")
@instance_option
@pass_ctx
def serve(ctx: Ctx, host: str, port: int | None, port_offset: int, token: str | None, instances: str | None,
          flavor: str | None, pool_sites: str | None, spares: int | None, heal_after: float, max_lease: float | None,
          base_offset: int, instance: str) -> None:
    """Reset server speaking BrowserGym's protocol (GET /reset, GET /status) plus POST /reset/SITE;
    with --instances N, also leases of isolated, verified-pristine instances (POST /leases, GET /metrics)."""
    from envctl.serve import make_pool
    from envctl.serve import serve as make
    from envctl.validate import validate_host, validate_port_offset

    from envctl.validate import validate_token

    port = port or ctx.catalog.reset_server.port
    validate_host(host, "--bind")
    validate_port_offset(port_offset, [port])
    if token is not None:
        validate_token(token)
    names = [n.strip() for n in (pool_sites or "").split(",") if n.strip()]
    pool_site_names = ctx.catalog.resolve(names) if names else None
    size = _pool_size(ctx, instances, instance, flavor, pool_site_names, spares, base_offset)
    lab = ctx.lab(instance)
    if lab.settings() is None and size is None:
        raise EnvctlError(f"instance '{instance}' does not exist on this Docker engine",
                          "start it with 'envctl up' before serving its resets, or serve a pool with --instances N")
    if max_lease is not None and size is None:
        raise UsageError("--max-lease needs a lease pool", "add --instances N")
    pool = None
    if size is not None:
        pool = make_pool(lab, size, flavor=flavor, sites=pool_site_names, spares=spares, heal_after=heal_after,
                         base_offset=base_offset, max_lease=max_lease, bind=host if host != "0.0.0.0" else "127.0.0.1",
                         say=lambda m: click.echo(m, err=True))
    server = make(lab, host, port + port_offset, token, pool=pool)
    click.echo(f"envctl reset server for instance '{instance}' on http://{host}:{server.server_address[1]}"
               + (f" (lease pool of {size}; leases answer 503 + Retry-After until its instances are up)"
                  if pool else ""), err=True)
    if pool is not None:
        pool.start()
    try:
        server.serve_forever()
    finally:
        if pool is not None:
            pool.stop()
        server.server_close()


def _pool_size(ctx: Ctx, instances: str | None, instance: str, flavor: str | None, sites: list[str] | None,
               spares: int | None, base_offset: int) -> int | None:
    """--instances N|auto -> N, refusing what cannot work before anything is started."""
    if instances is None:
        return None
    if instances.strip().lower() == "auto":
        from envctl.serve import auto_size

        names = ctx.catalog.resolve(sites, all_sites=not sites)
        size, why = auto_size(ctx.catalog, names, flavor or "full", spares, instance)
        if size < 1:
            raise EnvctlError(f"--instances auto: not even one instance fits ({why})",
                              "free memory, serve fewer --sites, pass --spares 0, or give --instances N")
        click.echo(f"--instances auto: {why}", err=True)
    else:
        try:
            size = int(instances)
        except ValueError:
            raise UsageError(f"--instances {instances[:20]!r} is not a number", "give 1 to 64, or 'auto'") from None
        if not 1 <= size <= 64:
            raise UsageError(f"--instances {size} is out of range", "give 1 to 64, or 'auto'")
    names = ctx.catalog.resolve(sites, all_sites=not sites)
    top = max(p for n in names for p in ctx.catalog.site(n).public_ports().values())
    if top + base_offset + 1000 * (size - 1) > 65535:
        raise UsageError(f"{size} instance(s) from --base-offset {base_offset} need ports up to "
                         f"{top + base_offset + 1000 * (size - 1)}, past 65535",
                         "give a lower --base-offset or fewer --instances")
    return size


# Seconds between a background replenisher's passes over a site whose pass failed: ~6 min in all, as on a
# crowded host (bench/density.py: 16 instances resetting at once on 2 cores) the proxy or the engine may
# not answer in time for minutes, and the next episode needs the spare.
REPLENISH_PAUSES = (5.0, 15.0, 30.0, 60.0, 60.0, 60.0, 60.0, 60.0)


@cli.command("_replenish", hidden=True)
@click.argument("site_names", nargs=-1)
@instance_option
@auth_dir_option
@pass_ctx
def replenish_cmd(ctx: Ctx, site_names: tuple[str, ...], instance: str, auth_dir: str | None) -> None:
    """Internal: remove dirty copies and boot spares (run detached by reset and up --spares)."""
    import signal
    import time as _t

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(143)  # unwinds: the spare being booted is removed ('envctl down' sends this)

    signal.signal(signal.SIGTERM, stop)
    from envctl.errors import DockerError, LoginFailed, NotReady

    lab = ctx.lab(instance, auth_dir)
    ctx.catalog.resolve(list(site_names))  # a wrong name or instance is refused at once, never retried
    lab.running()
    failed = []
    for site in site_names:
        t = _t.monotonic()
        # A failed pass (a proxy or engine too busy to answer in time on a crowded host) is tried again
        # after a pause: the next episode needs the spare. The next pass removes what the failed one
        # left half-booted. Each site gets its passes, whatever the one before it did.
        for attempt, pause in enumerate(REPLENISH_PAUSES + (None,), start=1):
            try:
                # another replenisher at work is doing the job: return at once
                slots = lab.replenish(site, progress=lambda s, p, d: click.echo(f"[{s}] {p}: {d}"), wait=False)
            except (DockerError, NotReady, LoginFailed) as exc:  # what a crowded host makes late; not a usage error
                click.echo(f"[{site}] pass {attempt} failed: {exc}" + (f"; again in {pause:.0f}s" if pause else ""))
                if pause is None:
                    failed.append(site)
                    break
                _t.sleep(pause)
                continue
            click.echo(f"[{site}] replenished {len(slots)} spare(s) in {_t.monotonic() - t:.1f}s")
            break
    if failed:
        raise EnvctlError(f"no spare booted for {', '.join(failed)} after {len(REPLENISH_PAUSES) + 1} passes",
                          "the next reset of these sites uses a slower tier; see 'envctl status'")


# -- smoke suite -----------------------------------------------------------------------------------
@cli.command()
@click.option("--tasks", "task_set", default="mini", show_default=True,
              help="bundled set (mini, webarena-smoke) or a task-config JSON file")
@click.option("--sites", default=None, help="comma-separated sites to test [every site that is up]")
@click.option("--agent", type=click.Choice(["reference", "llm"]), default="reference", show_default=True)
@instance_option
@click.option("--report", "report_dir", default="reports/smoke", show_default=True, help="JSON + HTML report folder")
@click.option("--parallel", type=click.IntRange(1, 8), default=3, show_default=True, help="site groups run at once")
@json_option
@pass_ctx
def smoke(ctx: Ctx, task_set: str, sites: str | None, agent: str, instance: str, report_dir: str, parallel: int,
          as_json: bool) -> None:
    """Run the reference agent through benchmark-format tasks and score them with the benchmark's evaluators."""
    from envctl.render import emit_json, err_console
    from envctl.smoke import format_table

    def progress(r: Any) -> None:
        if not as_json:
            err_console.print(f"{r.status:>4}  {','.join(r.sites):<22} {r.task_id}  {r.elapsed_s:.1f}s  {r.reason[:70]}")

    result = ctx.lab(instance).smoke(task_set, sites=sites.split(",") if sites else None, agent=agent,
                                     report_dir=report_dir, parallel=parallel, progress=progress,
                                     announce=(lambda m: None) if as_json else err_console.print)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(format_table(result))
        click.echo(f"report: {Path(report_dir) / 'report.html'}")
    _exit_unless(result.ok)


# -- cloud lab -------------------------------------------------------------------------------------
@cli.group()
def cloud() -> None:
    """A lab of EC2 hosts (boto3) or SSH hosts, configured by Ansible, each running envctl."""


@cloud.command("up")
@click.option("--lab", required=True, help="lab name (tags every resource)")
@click.option("--hosts", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--region", default=None, envvar="AWS_REGION", callback=_check_region, help="AWS region (AWS_REGION)")
@click.option("--instance-type", default="t3a.xlarge", show_default=True)
@click.option("--ami", default="webarena", show_default=True, help="webarena | ubuntu | an AMI id")
@click.option("--allow-cidr", "allow_cidrs", multiple=True, help="CIDR allowed to reach SSH and the sites (repeat)")
@click.option("--allow-world", is_flag=True, help="allow CIDRs that together cover all of IPv4/IPv6 (refused otherwise)")
@click.option("--key-name", default=None, help="use your EC2 key pair instead of creating one")
@click.option("--spot", is_flag=True)
@click.option("--ttl", default="8h", show_default=True, help="hosts terminate themselves after this")
@click.option("--sites", default="all", show_default=True, help="comma-separated sites, or all")
@flavor_option
@click.option("--inventory", "inventory_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="configure these SSH hosts (Ansible INI/YAML inventory) instead of creating EC2 hosts")
@click.option("--images-url", default="",
              help="the lab's S3/HTTP copy of the artifacts (URL/<artifact name>): the hosts' 'images get' tries it first")
@click.option("--instances-per-host", "instances", type=click.IntRange(1, 64), default=1, show_default=True,
              help="isolated instances on each host (distinct port offsets)")
@json_option
def cloud_up(lab: str, hosts: int, region: str | None, instance_type: str, ami: str, allow_cidrs: tuple[str, ...],
             allow_world: bool, key_name: str | None, spot: bool, ttl: str, sites: str, flavor: str | None,
             inventory_file: str | None, images_url: str, instances: int, as_json: bool) -> None:
    """Create the hosts (or take --inventory), prepare them with Ansible, run envctl up + serve on each."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json, err_console

    manifest, play = cloudlab.up(lab, hosts=hosts, region=region, instance_type=instance_type, ami=ami,
                                 allow_cidrs=allow_cidrs, allow_world=allow_world, key_name=key_name, spot=spot,
                                 ttl=ttl, sites=sites, flavor=flavor or "full", inventory_file=inventory_file,
                                 images_url=images_url, instances_per_host=instances,
                                 progress=(lambda m: None) if as_json else (lambda m: err_console.print(m)))
    failures = play.failures if play else []
    if as_json:
        emit_json({"lab": lab, "manifest": asdict(manifest), "failures": [asdict(f) for f in failures]})
    else:
        for f in failures:
            click.echo(f"error: host {f.host} failed at task '{f.task}': {f.output[-300:]}", err=True)
        click.echo(f"lab '{lab}': {len(manifest.hosts) - len(failures)} of {len(manifest.hosts)} hosts ready")
    _exit_unless(not failures)


@cloud.command("status")
@click.option("--lab", required=True)
@json_option
def cloud_status(lab: str, as_json: bool) -> None:
    """Hosts, state, health, TTL left and cost so far."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json, table

    st = cloudlab.status(lab)
    if as_json:
        emit_json(asdict(st))
    elif st.kind == "ec2":
        cost = f"${st.total_cost_usd:.2f} so far" if st.total_cost_usd is not None else "cost unknown"
        table(f"lab {lab}: {cost} (prices: {st.price_snapshot})",
              ["host", "address", "state", "type", "ready", "ttl left", "cost", "error"],
              [[h.name, h.address, h.state, h.instance_type, "yes" if h.ready else "no",
                f"{h.time_left_minutes:.0f} min" if h.time_left_minutes is not None else "-",
                f"${h.cost_usd:.2f}" if h.cost_usd is not None else "-", h.error or ""] for h in st.hosts])
    else:
        rows = []
        for h in st.hosts:
            shown: list[cloudlab.InstanceHealth | None] = list(h.instances) or [None]
            for i in shown:
                rows.append([h.name, h.address, "yes" if h.reachable else "NO", i.instance if i else "-",
                             ", ".join(i.sites_up) or "-" if i else "-", ", ".join(i.sites_down) if i else "",
                             "-" if i is None or i.ready is None else "yes" if i.ready else "no",
                             (i.error if i and i.error else h.error or "")[:80]])
        table(f"lab {lab} ({len(st.hosts)} hosts)",
              ["host", "address", "reachable", "instance", "sites up", "sites down", "ready", "error"], rows)
    # exit 1 unless every host is reachable (or running on EC2) and every instance's sites are up
    _exit_unless(all((h.reachable if h.reachable is not None else h.state == "running")
                     and all(i.running and not i.sites_down for i in h.instances) for h in st.hosts))


@cloud.command("env")
@click.option("--lab", required=True)
@click.option("--format", "fmt", type=click.Choice(["json", "browsergym", "agentlab"]), default="json", show_default=True)
@json_option
def cloud_env(lab: str, fmt: str, as_json: bool) -> None:
    """One URL set per host, for parallel workers (always JSON)."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json

    emit_json(cloudlab.env(lab, fmt))


@cloud.command("reset")
@click.option("--lab", required=True)
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@json_option
def cloud_reset(lab: str, site_names: tuple[str, ...], as_json: bool) -> None:
    """envctl reset on every host of the lab, in parallel."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json

    ctx_obj = click.get_current_context().find_object(Ctx)
    if site_names and ctx_obj is not None:
        ctx_obj.catalog.resolve(list(site_names))  # a typo is refused here, not on every host
    res = cloudlab.reset(lab, list(site_names))
    if as_json:
        emit_json({"lab": lab, "failures": [asdict(f) for f in res.failures]})
    for f in res.failures:
        click.echo(f"error: host {f.host} failed at task '{f.task}': {f.output[-300:]}", err=True)
    _exit_unless(not res.failures)


@cloud.command("down")
@click.option("--lab", required=True)
@click.option("--region", default=None, envvar="AWS_REGION", callback=_check_region)
@json_option
def cloud_down(lab: str, region: str | None, as_json: bool) -> None:
    """Terminate everything tagged with the lab; delete the group and key pair it created. Nothing else."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json

    teardown = cloudlab.down(lab, region=region, progress=lambda m: click.echo(m, err=True))
    if as_json:
        emit_json({"lab": lab, "teardown": asdict(teardown) if teardown is not None else None})


@cloud.command("serve")
@click.option("--lab", required=True, help="the lab whose instances (every host's) the pool leases")
@click.option("--host", "--bind", "host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="[the catalog's reset_server.port: 7565]")
@click.option("--token", default=None, envvar="ENVCTL_SERVE_TOKEN",
              help="required as http://host:port/<token>/... or 'Authorization: Bearer'; generated into "
                   "<state dir>/serve-<lab>.token when --bind is not loopback (ENVCTL_SERVE_TOKEN)")
@click.option("--max-lease", type=click.FloatRange(1, 7 * 24 * 3600), default=None, callback=_finite,
              help="reclaim (and reset) a lease held longer than this many seconds, even while it heartbeats")
@json_option
@pass_ctx
def cloud_serve(ctx: Ctx, lab: str, host: str, port: int | None, token: str | None, max_lease: float | None,
                as_json: bool) -> None:
    """A lab is one pool: lease the instances of every host of LAB (POST /leases, DELETE /leases/ID,
    GET /leases, /metrics); 'envctl lease ... --instance LAB' talks to it."""
    from envctl import cloud as cloudlab
    from envctl.render import emit_json
    from envctl.serve import serve_pool
    from envctl.validate import validate_host, validate_lab_name, validate_token

    validate_lab_name(lab)
    validate_host(host, "--bind")
    if token is not None:
        validate_token(token)
    port = port or ctx.catalog.reset_server.port
    say = (lambda m: click.echo(m, err=True))
    pool = cloudlab.pool(lab, log=say, max_lease=max_lease)
    remotes = pool.store.remotes  # type: ignore[attr-defined]
    server = serve_pool(lab, pool, host, port, token, say=say)
    shown = f"http://{host}:{server.server_address[1]}"  # without the token path: it is a secret
    if as_json:
        emit_json({"lab": lab, "url": shown, "token": bool(token or server.token),  # type: ignore[attr-defined]
                   "instances": [{"host": r.host, "instance": r.instance} for r in remotes.values()]})
    else:
        click.echo(f"envctl lease server for lab '{lab}' on {shown} ({len(remotes)} instances on "
                   f"{len({r.host for r in remotes.values()})} hosts); "
                   f"'envctl lease acquire --instance {lab}' leases one", err=True)
    pool.start()
    try:
        server.serve_forever()
    finally:
        pool.stop()
        server.server_close()


# -- leases (docs/architecture.md, "Leases") ------------------------------------------------------------
@cli.group()
def lease() -> None:
    """Isolated, verified-pristine instances on lease from 'envctl serve --instances N' (--instance
    names the pool) or 'envctl cloud serve --lab L' (--instance L); $ENVCTL_LEASE_SERVER overrides."""


def _lease_client(instance: str) -> Any:
    from envctl.leases.client import LeaseClient, find_server

    return LeaseClient(find_server(None, instance))


def _pool_leases(instance: str) -> dict[str, Any] | None:
    """What the lease server of ``instance`` (a pool) says, when one runs; None otherwise."""
    from envctl.leases.client import running_server_url

    try:
        url = running_server_url(instance)
    except UsageError:
        return None
    if url is None:
        return None
    from envctl.leases.client import LeaseClient

    try:
        data = LeaseClient(url).listing()
    except EnvctlError:
        return None
    return data if isinstance(data, dict) and "instances" in data else None


def _show_pool(instance: str, data: dict[str, Any]) -> None:
    from envctl.render import table

    table(f"pool {instance}", ["instance", "state", "lease", "holder", "sites", "expires in"],
          [[r["instance"], r["state"] + (f" ({r['error'][:60]})" if r.get("error") else ""), r.get("id", ""),
            r.get("holder", ""), ",".join(r.get("lease_sites") or r.get("sites") or []),
            f"{r['seconds_left']:.0f}s" if r.get("seconds_left") is not None else ""] for r in data["instances"]])
    s = data["summary"]
    resets = ", ".join(f"{t}: {v['count']} (mean {v['mean_s']}s, {v['failed']} failed)" for t, v in s["resets"].items())
    turn = s.get("turnaround") or {}
    click.echo(("pool starting; " if s.get("starting") else "")
               + f"leases active {s['leases_active']}, free {s['leases_free']}; acquired {s['acquired']}, "
               f"released {s['released']}, expired {s['expired']}, reclaimed {s.get('reclaimed', 0)}, "
               f"refused {s['rejected']}; dirty instances caught {s.get('dirty_found', 0)}")
    click.echo(f"resets: {resets or 'none'}; release to free: p50 {turn.get('p50_s')}s p95 {turn.get('p95_s')}s "
               f"({turn.get('count', 0)}); heals: {sum(s['heals'].values())} {s['heals'] or ''}; "
               f"spares ready: {s['spares_ready'] or 'none'}")


@lease.command("acquire")
@click.option("--sites", default=None, help="comma-separated sites the lease needs [all of the instance's]")
@click.option("--ttl", type=click.FloatRange(1, 7 * 24 * 3600), default=600.0, show_default=True, callback=_finite,
              help="seconds until the lease expires unless a heartbeat ('envctl lease heartbeat') extends it")
@click.option("--wait", type=click.FloatRange(0, 3600), default=0.0, callback=_finite,
              help="wait up to this many seconds for a free instance")
@click.option("--max-seconds", type=click.FloatRange(1, 7 * 24 * 3600), default=None, callback=_finite,
              help="the server reclaims the lease this long after it was granted, heartbeats or not")
@click.option("--holder", default="", help="who holds the lease (shown by 'lease list')")
@click.option("--format", "fmt", type=click.Choice(["shell", "json", "browsergym"]), default="shell", show_default=True)
@click.option("--out", default=None, help="also write the login state files (storage_state) into this folder")
@instance_option
@json_option
def lease_acquire(sites: str | None, ttl: float, wait: float, max_seconds: float | None, holder: str, fmt: str,
                  out: str | None, instance: str, as_json: bool) -> None:
    """Lease a free instance whose every site verifies pristine; print its variables (ENVCTL_LEASE is
    the id to release). If anything fails after the lease was granted, it is given back."""
    import json as _json
    import shlex

    from envctl.locks import write_private

    names = [n for n in (sites or "").split(",") if n]
    ctx_obj = click.get_current_context().find_object(Ctx)
    if names and ctx_obj is not None:
        ctx_obj.catalog.resolve(names)  # a typo is refused before the server is asked
    from envctl.locks import usable_dir

    # a file there (or above it), or a read-only folder: refused before the server is asked
    folder = usable_dir(out, "--out", hint="give --out a folder for the login state files") if out else None
    client = _lease_client(instance)
    lease = client.acquire(names or None, ttl=ttl, wait=wait, holder=holder or f"cli pid {os.getpid()}",
                           max_seconds=max_seconds)
    try:
        if folder is not None:
            try:
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                for fname, state in (lease.auth or {}).items():
                    write_private(folder / Path(fname).name, _json.dumps(state))
            except OSError as exc:
                raise EnvctlError(f"cannot write the login state into {out}: {exc.strerror or exc}",
                                  "give a writable folder with --out") from None
        data = lease.to_dict()
        if as_json or fmt == "json":
            from envctl.render import emit_json

            return emit_json(data)
        env = data.get("env") or {}
        if fmt == "browsergym":
            env = {k: v for k, v in env.items() if k.startswith(("WA_", "VWA_")) or k.startswith("ENVCTL_")}
        click.echo("".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in env.items()), nl=False)
    except BaseException:
        try:
            client.release(lease.id)
            click.echo(f"note: lease {lease.id} given back (the command failed after it was granted)", err=True)
        except EnvctlError as exc:
            click.echo(f"warning: lease {lease.id} could not be given back ({str(exc).splitlines()[0]}); "
                       f"release it with 'envctl lease release {lease.id} --instance {instance}'", err=True)
        raise


@lease.command("heartbeat")
@click.argument("lease_id")
@click.option("--ttl", type=click.FloatRange(1, 7 * 24 * 3600), default=None, callback=_finite,
              help="a new time to live in seconds [the lease's own]")
@instance_option
@json_option
def lease_heartbeat(lease_id: str, ttl: float | None, instance: str, as_json: bool) -> None:
    """Extend a lease (exit 1 with why when it already ended: expired, reclaimed or released)."""
    data = _lease_client(instance).heartbeat(lease_id, ttl)
    if as_json:
        from envctl.render import emit_json

        return emit_json(data)
    click.echo(f"lease {lease_id} on {data.get('instance')}: expires in {data.get('seconds_left', 0):.0f}s")


@lease.command("release")
@click.argument("lease_id")
@instance_option
@json_option
def lease_release(lease_id: str, instance: str, as_json: bool) -> None:
    """Give a lease back; every site of its instance that does not verify (and the leased ones) is
    reset before the instance is leased again."""
    data = _lease_client(instance).release(lease_id)
    if as_json:
        from envctl.render import emit_json

        return emit_json(data)
    click.echo(f"released {lease_id} ({data.get('instance')}): resetting {', '.join(data.get('lease_sites') or [])}")


@lease.command("list")
@instance_option
@json_option
def lease_list(instance: str, as_json: bool) -> None:
    """The pool's instances, their leases (holder, expiry), and the figures of GET /metrics."""
    from envctl.render import emit_json

    data = _lease_client(instance).listing()
    if as_json:
        return emit_json(data)
    _show_pool(instance, data)


def main() -> None:
    cli(prog_name="envctl")


if __name__ == "__main__":
    main()
