"""envctl command line: thin Click commands that call ``envctl.Lab`` and render the result.

Errors: every ``EnvctlError`` becomes one line ``error: ... ; hint`` and its exit code (1 runtime,
2 usage); anything unexpected prints one line and writes the traceback to a debug log.
"""
from __future__ import annotations

import functools
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

import click

from envctl import __version__
from envctl.errors import EnvctlError

SITE_HELP = "site names from the catalog (see 'envctl sites list')"


class Ctx:
    def __init__(self, catalog_path: str | None) -> None:
        self.catalog_path = catalog_path
        self._catalog = None

    @property
    def catalog(self):  # noqa: ANN201 - lazy so --help and --version never parse YAML
        if self._catalog is None:
            from envctl.catalog import load_catalog

            self._catalog = load_catalog(self.catalog_path)
        return self._catalog

    def lab(self, instance: str = "default", auth_dir: str | None = None):  # noqa: ANN201
        from envctl.lab import Lab

        return Lab(self.catalog, catalog_path=self.catalog_path, instance=instance, auth_dir=auth_dir)


pass_ctx = click.make_pass_decorator(Ctx)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except EnvctlError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted; nothing half-done is kept as ready — run the command again to finish", err=True)
            sys.exit(130)
        except click.exceptions.Exit:
            raise
        except Exception as exc:  # noqa: BLE001 - the one boundary for unexpected errors
            log = Path(tempfile.gettempdir()) / "envctl-debug.log"
            log.write_text(traceback.format_exc())
            click.echo(f"error: unexpected {type(exc).__name__}: {exc} (traceback in {log}; please report it)", err=True)
            sys.exit(1)

    return inner


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="machine-readable output")(fn)


def instance_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--instance", "-i", default=lambda: os.environ.get("ENVCTL_INSTANCE", "default"),
                        show_default="default", help="instance name (ENVCTL_INSTANCE)")(fn)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envctl")
@click.option("--catalog", type=click.Path(dir_okay=False), envvar="ENVCTL_CATALOG",
              help="site catalog YAML (default: the built-in one; env ENVCTL_CATALOG)")
@click.pass_context
def cli(ctx: click.Context, catalog: str | None) -> None:
    """Provision, reset and verify the WebArena / VisualWebArena sites for web-agent evaluation."""
    ctx.obj = Ctx(catalog)


# -- sites ---------------------------------------------------------------------------------------
@cli.group()
def sites() -> None:
    """What the catalog knows about each site."""


@sites.command("list")
@json_option
@pass_ctx
@handle_errors
def sites_list(ctx: Ctx, as_json: bool) -> None:
    """Every site with its ports, flavors, benchmarks and reset tier."""
    from envctl.render import emit_json, table

    rows = []
    for name, s in ctx.catalog.sites.items():
        rows.append({"site": name, "title": s.title, "benchmarks": list(s.benchmarks),
                     "ports": s.public_ports(), "flavors": list(s.flavors), "reset": s.reset.tier,
                     "login": s.login.account if s.login else None})
    if as_json:
        return emit_json(rows)
    table(None, ["site", "title", "ports", "flavors", "benchmarks", "reset", "login"],
          [[r["site"], r["title"], ", ".join(f"{k}:{v}" if len(r["ports"]) > 1 else str(v) for k, v in r["ports"].items()),
            ",".join(r["flavors"]), ",".join(r["benchmarks"]), r["reset"], r["login"] or "-"] for r in rows])


@sites.command("show")
@click.argument("site")
@json_option
@pass_ctx
@handle_errors
def sites_show(ctx: Ctx, site: str, as_json: bool) -> None:
    """Everything the catalog knows about SITE (passwords and secrets masked)."""
    from envctl.catalog import Deployment, Renderer
    from envctl.provision.local import mask
    from envctl.render import console, emit_json

    import json

    s = ctx.catalog.site(site)
    data = s.model_dump(mode="json")
    text = mask(s, json.dumps(data))
    data = json.loads(text)
    r = Renderer(ctx.catalog, site, Deployment())
    data["rendered_for_127.0.0.1"] = {f: [mask(s, " ".join(r.argv(st.run))) for st in s.steps(f)] for f in s.flavors}
    if as_json:
        return emit_json(data)
    import yaml

    console.print(yaml.safe_dump({site: data}, sort_keys=False, width=110))


# -- doctor --------------------------------------------------------------------------------------
@cli.command()
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@click.option("--flavor", default="full", show_default=True, help="flavor whose needs are checked")
@click.option("--port-offset", type=int, default=0)
@click.option("--bind", default="127.0.0.1", show_default=True)
@json_option
@pass_ctx
@handle_errors
def doctor(ctx: Ctx, site_names: tuple[str, ...], flavor: str, port_offset: int, bind: str, as_json: bool) -> None:
    """Check this machine for 'envctl up': engine, storage driver, disk, RAM, ports, images, browser."""
    from envctl.doctor import run_doctor
    from envctl.render import emit_json, table

    report = run_doctor(ctx.catalog, list(site_names) or None, flavor=flavor, port_offset=port_offset, bind=bind)
    if as_json:
        emit_json(report)
    else:
        table(None, ["check", "status", "detail", "fix"],
              [[c["check"], {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}[c["status"]],
                c["detail"], c.get("fix") or ""] for c in report["checks"]])
    if not report["ok"]:
        sys.exit(1)


# -- images --------------------------------------------------------------------------------------
@cli.group()
def images() -> None:
    """Get, build, verify and move the sites' images."""


@images.command("build")
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@click.option("--flavor", default="mini", show_default=True, type=click.Choice(["mini", "full"]),
              help="mini: every mini image; full: the images envctl builds itself (homepage)")
@json_option
@pass_ctx
@handle_errors
def images_build(ctx: Ctx, site_names: tuple[str, ...], flavor: str, as_json: bool) -> None:
    """Build the images envctl makes itself (mini flavor, homepage, front proxy)."""
    from envctl.images.build import build_for_sites
    from envctl.render import emit_json, err_console

    names = ctx.catalog.resolve(list(site_names) or None)
    times = build_for_sites(ctx.catalog, names, flavor,
                            progress=None if as_json else (lambda m: err_console.print(m)))
    if as_json:
        emit_json({"built": {k: round(v, 2) for k, v in times.items()}})


def _event_printer(as_json: bool):  # noqa: ANN202
    """Progress for image transfers: JSON lines on stderr with --json, else a rich progress display."""
    from envctl.render import TransferProgress

    return TransferProgress(json_events=as_json)


@images.command("list")
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@click.option("--flavor", default="full", show_default=True)
@json_option
@pass_ctx
@handle_errors
def images_list(ctx: Ctx, site_names: tuple[str, ...], flavor: str, as_json: bool) -> None:
    """Per site: every artifact, its sources, expected size, whether it is present, its pinned sha256."""
    from dataclasses import asdict

    from envctl.images.get import list_images
    from envctl.render import emit_json, table

    rows = list_images(ctx.catalog, sites=ctx.catalog.resolve(list(site_names) or None), flavor=flavor)
    if as_json:
        return emit_json([asdict(r) for r in rows])
    table(f"{flavor} flavor artifacts", ["site", "artifact", "kind", "size", "present", "sha256", "sources"],
          [[r.site, r.name, r.kind, f"{r.size / 1e9:.1f} GB" if r.size else "?", "yes" if r.present else "no",
            (r.sha256 or "")[:12] or "-", ", ".join(src.split(" ")[0] for src in r.sources)]
           for r in rows])


@images.command("get")
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@click.option("--all", "all_sites", is_flag=True)
@click.option("--flavor", default="full", show_default=True)
@click.option("--mirror", default=None, help="use only this mirror (e.g. cmu, archive.org, gdrive)")
@click.option("--keep-archive", is_flag=True, help="keep the downloaded tarball (resumable) instead of streaming it")
@click.option("--jobs", type=int, default=1, show_default=True, help="artifacts fetched in parallel")
@json_option
@pass_ctx
@handle_errors
def images_get(ctx: Ctx, site_names: tuple[str, ...], all_sites: bool, flavor: str, mirror: str | None,
               keep_archive: bool, jobs: int, as_json: bool) -> None:
    """Fetch missing images and data: registry, then tarball mirrors; resumable, verified, streamed."""
    from dataclasses import asdict

    from envctl.images.get import get_images
    from envctl.render import emit_json, table

    names = ctx.catalog.resolve(list(site_names) or None, all_sites=all_sites)
    with _event_printer(as_json) as progress:
        results = get_images(ctx.catalog, names, flavor=flavor, mirror=mirror, keep_archive=keep_archive, jobs=jobs,
                             progress=progress)
    if as_json:
        emit_json([asdict(r) for r in results])
    else:
        table(None, ["site", "artifact", "result", "detail"],
              [[r.site, r.name, r.action, (r.error or "")[:100]] for r in results])
    if any(r.action == "failed" for r in results):
        sys.exit(1)


@images.command("verify")
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@click.option("--flavor", default="full", show_default=True)
@json_option
@pass_ctx
@handle_errors
def images_verify(ctx: Ctx, site_names: tuple[str, ...], flavor: str, as_json: bool) -> None:
    """Re-check present artifacts against their pins (size, sha256, registry digest)."""
    from dataclasses import asdict

    from envctl.images.get import verify_images
    from envctl.render import emit_json, table

    res = verify_images(ctx.catalog, ctx.catalog.resolve(list(site_names) or None), flavor=flavor)
    if as_json:
        emit_json([asdict(r) for r in res])
    else:
        table(None, ["site", "artifact", "ok", "detail"], [[r.site, r.name, "ok" if r.ok else "FAIL", r.detail] for r in res])
    if not all(r.ok for r in res):
        sys.exit(1)


@images.command("export")
@click.argument("site")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--flavor", default="full", show_default=True)
@json_option
@pass_ctx
@handle_errors
def images_export(ctx: Ctx, site: str, file: str, flavor: str, as_json: bool) -> None:
    """Save SITE's image(s) to FILE (plus FILE.sha256) to move them to another host."""
    from dataclasses import asdict

    from envctl.images.get import export_image
    from envctl.render import emit_json

    s = ctx.catalog.site(site)
    tags = [s.services[svc].flavors[flavor].image for svc in s.services_for(flavor)]
    out = export_image(tags[0], Path(file))
    if as_json:
        return emit_json(asdict(out))
    click.echo(f"exported {tags[0]} to {out.path} ({out.size / 1e6:.1f} MB, sha256 {out.sha256[:12]})")


@images.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--tag", default=None, help="tag to give the loaded image")
@json_option
@handle_errors
def images_import(file: str, tag: str | None, as_json: bool) -> None:
    """Load an image file written by 'images export' (checked against FILE.sha256 when present)."""
    from dataclasses import asdict

    from envctl.images.get import import_image
    from envctl.render import emit_json

    res = import_image(Path(file), tag=tag)
    if as_json:
        return emit_json(asdict(res))
    click.echo(f"loaded {', '.join(res.tags) or res.image_id}")


@images.command("prune")
@click.option("--dry-run", is_flag=True)
@json_option
@handle_errors
def images_prune(dry_run: bool, as_json: bool) -> None:
    """Remove envctl's partial downloads and the dangling images it made."""
    from dataclasses import asdict

    from envctl.images.get import prune
    from envctl.render import emit_json

    res = prune(dry_run=dry_run)
    if as_json:
        return emit_json(asdict(res))
    click.echo(f"{'would remove' if dry_run else 'removed'} {len(res.files)} files ({res.freed / 1e6:.1f} MB) "
               f"and {len(res.images)} images")


# -- lifecycle -----------------------------------------------------------------------------------
@cli.command()
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@click.option("--all", "all_sites", is_flag=True, help="every site of the catalog")
@click.option("--flavor", type=str, default=None, help="full (upstream images) or mini [default: full, or the instance's]")
@instance_option
@click.option("--public-host", default=None, help="host name the browser and harness use [127.0.0.1]")
@click.option("--bind", default=None, help="address the public ports bind to [127.0.0.1]")
@click.option("--port-offset", type=int, default=None, help="add N to every public port [0]")
@click.option("--no-wait", is_flag=True, help="do not wait for health probes")
@click.option("--login/--no-login", default=True, show_default=True, help="seed login state files when healthy")
@click.option("--auth-dir", default=None, help="where login state files go [.auth]")
@click.option("--spares", type=click.IntRange(0, 8), default=None,
              help="pre-boot K pristine spares per site for ~1 s resets (booted in the background)")
@json_option
@pass_ctx
@handle_errors
def up(ctx: Ctx, site_names: tuple[str, ...], all_sites: bool, flavor: str | None, instance: str,
       public_host: str | None, bind: str | None, port_offset: int | None, no_wait: bool, login: bool,
       auth_dir: str | None, spares: int | None, as_json: bool) -> None:
    """Start sites (all by default), configure them and wait until every one is healthy."""
    from envctl.render import SiteProgress, emit_json, table

    lab = ctx.lab(instance, auth_dir)
    if not site_names and not all_sites:
        all_sites = True
    with SiteProgress(json_events=as_json) as progress:
        result = lab.up(list(site_names), all_sites=all_sites, flavor=flavor, public_host=public_host, bind=bind,
                        port_offset=port_offset, wait=not no_wait, login=login, spares=spares, progress=progress)
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
    if not result.ok:
        sys.exit(1)


@cli.command()
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@instance_option
@click.option("--volumes", is_flag=True, help="also remove the instance's named volumes")
@json_option
@pass_ctx
@handle_errors
def down(ctx: Ctx, site_names: tuple[str, ...], instance: str, volumes: bool, as_json: bool) -> None:
    """Stop and remove what envctl made for the instance (only that, found by label)."""
    from envctl.render import emit_json

    result = ctx.lab(instance).down(list(site_names) or None, volumes=volumes)
    if as_json:
        return emit_json(result)
    click.echo(f"removed {len(result['removed'])} containers of instance '{instance}'")


@cli.command()
@instance_option
@json_option
@pass_ctx
@handle_errors
def status(ctx: Ctx, instance: str, as_json: bool) -> None:
    """Per site: containers, roles, health (each probe with latency), URL, flavor, image, uptime."""
    from envctl.render import emit_json, table

    st = ctx.lab(instance).status()
    if as_json:
        emit_json(st)
        sys.exit(0 if st["running"] and all(s["healthy"] for s in st["sites"]) else 1)
    if not st["running"]:
        click.echo(f"instance '{instance}' is not running (start it with 'envctl up')")
        sys.exit(3)
    rows = []
    for s in st["sites"]:
        probes = " ".join(f"{p['name']}:{'ok' if p['ok'] else 'FAIL'}({p['latency_ms']:.0f}ms)" for p in s["probes"])
        active = [c for c in s["containers"] if c["role"] == "active"]
        rows.append([s["site"], s["url"], "[green]healthy[/]" if s["healthy"] else "[red]unhealthy[/]", probes,
                     active[0]["image"] if active else "-", f"{active[0]['uptime_s']:.0f}s" if active else "-",
                     s["spares_ready"]])
    table(f"instance {instance} ({st['flavor']}, {st['public_host']}, bind {st['bind']})",
          ["site", "url", "health", "probes", "image", "uptime", "spares"], rows)
    if not all(s["healthy"] for s in st["sites"]):
        sys.exit(1)


@cli.command()
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@instance_option
@click.option("--wait", is_flag=True, help="wait (up to each site's deadline) until healthy")
@json_option
@pass_ctx
@handle_errors
def health(ctx: Ctx, site_names: tuple[str, ...], instance: str, wait: bool, as_json: bool) -> None:
    """Run the sites' health probes now."""
    from envctl.render import emit_json, table

    res = ctx.lab(instance).health(list(site_names) or None, wait=wait)
    ok = all(p.ok for ps in res.values() for p in ps)
    if as_json:
        emit_json({"ok": ok, "sites": {k: [p.to_dict() for p in v] for k, v in res.items()}})
    else:
        table(None, ["site", "probe", "ok", "latency", "detail"],
              [[s, p.name, "ok" if p.ok else "[red]FAIL[/]", f"{p.latency_ms:.0f}ms", p.detail[:80]]
               for s, ps in res.items() for p in ps])
    if not ok:
        sys.exit(1)


@cli.command("env")
@click.option("--format", "fmt", type=click.Choice(["shell", "dotenv", "json", "browsergym", "agentlab"]),
              default="shell", show_default=True)
@click.option("--benchmark", type=click.Choice(["webarena", "visualwebarena"]), default="webarena",
              show_default=True, help="which harness's names (shell/dotenv)")
@instance_option
@json_option
@pass_ctx
@handle_errors
def env_cmd(ctx: Ctx, fmt: str, benchmark: str, instance: str, as_json: bool) -> None:
    """The URLs for harnesses, exactly as WebArena, VisualWebArena, BrowserGym or AgentLab expect them.

    With --json, shell/dotenv/browsergym print the same variables as one flat JSON object."""
    from envctl.envformat import format_env, values
    from envctl.render import emit_json

    lab = ctx.lab(instance)
    if as_json and fmt in ("shell", "dotenv", "browsergym"):
        return emit_json(values(lab, fmt, benchmark))
    click.echo(format_env(lab, fmt, benchmark), nl=False)


@cli.command()
@json_option
@pass_ctx
@handle_errors
def instances(ctx: Ctx, as_json: bool) -> None:
    """Every envctl instance on this engine with its URL set."""
    from envctl.lab import Lab
    from envctl.render import emit_json, table

    found = Lab.instances()
    if as_json:
        return emit_json(found)
    table(None, ["instance", "flavor", "state", "bind", "offset", "sites", "homepage"],
          [[i["instance"], i["flavor"], i["state"], i["bind"], i["port_offset"], ",".join(i["sites"]),
            i["webarena"].get("HOMEPAGE", "")] for i in found])


@cli.command()
@click.argument("site")
@click.option("--service", default=None, help="service of a multi-container site (e.g. db)")
@click.option("-f", "--follow", is_flag=True)
@click.option("--tail", type=int, default=100, show_default=True)
@instance_option
@pass_ctx
@handle_errors
def logs(ctx: Ctx, site: str, service: str | None, follow: bool, tail: int, instance: str) -> None:
    """Logs of a site's active container."""
    lab = ctx.lab(instance)
    if follow:
        from envctl.provision.docker import stream_logs

        for chunk in stream_logs(lab.container(site, service)):
            click.echo(chunk, nl=False)
    else:
        click.echo(lab.logs(site, service=service, tail=tail), nl=False)


@cli.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("site")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--service", default=None)
@instance_option
@pass_ctx
@handle_errors
def exec_cmd(ctx: Ctx, site: str, argv: tuple[str, ...], service: str | None, instance: str) -> None:
    """Run a command in a site's active container: envctl exec shopping -- mysql -e 'SELECT 1'."""
    rc, out = ctx.lab(instance).exec(site, list(argv), service=service)
    click.echo(out)
    sys.exit(rc)


@cli.command()
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@click.option("--all", "all_sites", is_flag=True, help="every login site that is up (the default)")
@instance_option
@click.option("--out", "out", default=None, help="folder for the state files [.auth]")
@click.option("--check", "check_only", is_flag=True, help="validate existing files with the expiry probes; no login")
@click.option("--max-age", default=None, help="renew files older than this (90s, 30m, 12h, 2d); keep younger valid ones")
@json_option
@pass_ctx
@handle_errors
def login(ctx: Ctx, site_names: tuple[str, ...], all_sites: bool, instance: str, out: str | None, check_only: bool,
          max_age: str | None, as_json: bool) -> None:
    """Log in with each site's benchmark account; write Playwright storage_state files named as upstream."""
    from envctl.auth import Target, check, login as do_login, parse_duration
    from envctl.errors import UsageError
    from envctl.render import emit_json, table

    lab = ctx.lab(instance)
    sites = [ctx.catalog.site(n) and n for n in site_names] or None
    target = Target.of_lab(lab, out)
    if check_only:
        report = check(target, sites)
    else:
        try:
            age = parse_duration(max_age) if max_age else None
        except ValueError as exc:
            raise UsageError(f"invalid --max-age '{max_age}': {exc}", "use e.g. 90s, 30m, 12h or 2d") from None
        report = do_login(target, sites, max_age=age)
    if as_json:
        emit_json(report.to_dict())
    else:
        table(None, ["file", "ok", "action", "seconds", "problem"],
              [[f.name, "[green]ok[/]" if f.ok else "[red]FAIL[/]", f.action, f"{f.seconds:.1f}", f.error]
               for f in report.files])
    if not report.ok:
        sys.exit(1)


# -- state: reset, verify, snapshots, reset server ------------------------------------------------
@cli.command()
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@click.option("--all", "all_sites", is_flag=True, help="every site that is up")
@click.option("--tier", type=click.Choice(["spare", "endpoint", "recreate", "none"]), default=None,
              help="start at this tier instead of the catalog's")
@click.option("--no-wait", is_flag=True, help="refuse instead of waiting when the site is being reset already")
@instance_option
@click.option("--auth-dir", default=None)
@json_option
@pass_ctx
@handle_errors
def reset(ctx: Ctx, site_names: tuple[str, ...], all_sites: bool, tier: str | None, no_wait: bool, instance: str,
          auth_dir: str | None, as_json: bool) -> None:
    """Pristine state again (spare swap, app endpoint, recreate or none), verified by probes and fingerprint."""
    from envctl.render import SiteProgress, emit_json, table

    if not site_names and not all_sites:
        raise click.UsageError("name the sites to reset, or pass --all")
    lab = ctx.lab(instance, auth_dir)
    with SiteProgress(json_events=as_json) as progress:
        results = lab.reset(list(site_names), all_sites=all_sites, tier=tier, wait=not no_wait, progress=progress)
    if as_json:
        emit_json([r.to_dict() for r in results])
    else:
        table(None, ["site", "ok", "tier", "total", "phases", "escalations"],
              [[r.site, "[green]ok[/]" if r.ok else "[red]FAILED[/]", r.tier, f"{r.seconds:.3f}s",
                " ".join(f"{k}={v:.3f}s" for k, v in r.phases.items()), "; ".join(r.escalations)] for r in results])
    if not all(r.ok for r in results):
        sys.exit(1)


@cli.command("verify")
@click.argument("site")
@instance_option
@json_option
@pass_ctx
@handle_errors
def verify_cmd(ctx: Ctx, site: str, instance: str, as_json: bool) -> None:
    """Compare SITE's live state with its pristine fingerprint and print what differs."""
    from envctl.render import emit_json

    res = ctx.lab(instance).verify(site)
    if as_json:
        emit_json(res)
    else:
        click.echo(f"{site}: {'pristine' if res['ok'] else 'DIFFERS'} (expected {str(res['expected'])[:12]}, "
                   f"live {res['actual'][:12]})")
        for line in res["differences"]:
            click.echo(f"  {line}")
    if not res["ok"]:
        sys.exit(1)


@cli.group()
def snapshot() -> None:
    """Golden images and named snapshots of a site's state."""


@snapshot.command("create")
@click.argument("site")
@click.option("--name", default="golden", show_default=True, help="'golden' (what resets return to) or any name")
@instance_option
@json_option
@pass_ctx
@handle_errors
def snapshot_create(ctx: Ctx, site: str, name: str, instance: str, as_json: bool) -> None:
    """Stop SITE cleanly, commit it, start it again."""
    from envctl.render import emit_json

    res = ctx.lab(instance).snapshot_create(site, name)
    if as_json:
        return emit_json(res)
    click.echo(f"snapshot '{name}' of {site}: {', '.join(res['images'].values())} (fingerprint {res['fingerprint'][:12]})")


@snapshot.command("list")
@click.option("--site", default=None)
@instance_option
@json_option
@pass_ctx
@handle_errors
def snapshot_list(ctx: Ctx, site: str | None, instance: str, as_json: bool) -> None:
    """Golden images and this instance's named snapshots."""
    from dataclasses import asdict

    from envctl.render import emit_json, table
    from envctl.state.snapshots import list_snapshots

    rows = list_snapshots(ctx.lab(instance), site)
    if as_json:
        return emit_json([asdict(r) for r in rows])
    table(None, ["site", "kind", "name", "service", "image", "public url", "fingerprint", "MB"],
          [[r.site, r.kind, r.name, r.service, r.image, r.public_url, r.fingerprint, r.size_mb] for r in rows])


@snapshot.command("restore")
@click.argument("site")
@click.argument("name")
@instance_option
@json_option
@pass_ctx
@handle_errors
def snapshot_restore(ctx: Ctx, site: str, name: str, instance: str, as_json: bool) -> None:
    """Make SITE's state the named snapshot's (new copy, verified, swapped in)."""
    from envctl.render import emit_json

    res = ctx.lab(instance).snapshot_restore(site, name)
    if as_json:
        return emit_json(res)
    click.echo(f"{site} restored to '{name}' in {res['seconds']:.1f}s")


@snapshot.command("rm")
@click.argument("name")
@click.option("--site", default=None)
@instance_option
@pass_ctx
@handle_errors
def snapshot_rm(ctx: Ctx, name: str, site: str | None, instance: str) -> None:
    """Remove a named snapshot (or, with NAME=golden, golden images)."""
    from envctl.state.snapshots import remove_snapshot

    for tag in remove_snapshot(ctx.lab(instance), name, site):
        click.echo(f"removed {tag}")


@cli.command()
@click.option("--host", "--bind", "host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", type=int, default=7565, show_default=True)
@click.option("--port-offset", type=int, default=0, help="added to --port (one server per instance on a host)")
@click.option("--token", default=None, envvar="ENVCTL_SERVE_TOKEN", help="require this token (?token= or X-Envctl-Token)")
@instance_option
@pass_ctx
@handle_errors
def serve(ctx: Ctx, host: str, port: int, port_offset: int, token: str | None, instance: str) -> None:
    """Reset server speaking BrowserGym's protocol (GET /reset, GET /status) plus POST /reset/SITE."""
    from envctl.serve import serve as make

    server = make(ctx.lab(instance), host, port + port_offset, token)
    click.echo(f"envctl reset server for instance '{instance}' on http://{host}:{server.server_address[1]}", err=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


@cli.command("_replenish", hidden=True)
@click.argument("site_names", nargs=-1)
@instance_option
@click.option("--auth-dir", default=None)
@pass_ctx
@handle_errors
def replenish_cmd(ctx: Ctx, site_names: tuple[str, ...], instance: str, auth_dir: str | None) -> None:
    """Internal: remove dirty copies and boot spares (run detached by reset and up --spares)."""
    import time as _t

    lab = ctx.lab(instance, auth_dir)
    for site in site_names:
        t = _t.monotonic()
        slots = lab.replenish(site, progress=lambda s, p, d: click.echo(f"[{s}] {p}: {d}"))
        click.echo(f"[{site}] replenished {len(slots)} spare(s) in {_t.monotonic() - t:.1f}s")


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
@handle_errors
def smoke(ctx: Ctx, task_set: str, sites: str | None, agent: str, instance: str, report_dir: str, parallel: int,
          as_json: bool) -> None:
    """Run the reference agent through benchmark-format tasks and score them with the benchmark's evaluators."""
    from envctl.errors import UsageError
    from envctl.render import emit_json, err_console
    from envctl.smoke import load_task_set, run_smoke
    from envctl.smoke.judge import Judge
    from envctl.smoke.report import format_table

    lab = ctx.lab(instance)
    up = lab.sites_up()
    if not up:
        raise UsageError(f"instance '{instance}' has no site up", "run 'envctl up --flavor mini' first")
    wanted = [ctx.catalog.site(s) and s for s in sites.split(",")] if sites else up
    missing = [s for s in wanted if s not in up]
    if missing:
        raise UsageError(f"not up in instance '{instance}': {', '.join(missing)}", f"run 'envctl up {' '.join(missing)}'")
    tasks = load_task_set(task_set, sites=wanted)
    with_login = [s for s in wanted if ctx.catalog.site(s).login]
    if with_login:
        if not as_json:
            err_console.print(f"seeding login state for {', '.join(with_login)}")
        lab.login(with_login)
    env = {**lab.env("visualwebarena"), **lab.env("webarena")}  # WebArena's WIKIPEDIA (landing URL) wins

    def reset(names: list[str]) -> None:
        bad = [r for r in lab.reset(names) if not r.ok]
        if bad:
            raise EnvctlError(f"reset of {', '.join(r.site for r in bad)} failed: {bad[0].error}")

    def progress(r: Any) -> None:
        if not as_json:
            err_console.print(f"{r.status:>4}  {','.join(r.sites):<22} {r.task_id}  {r.elapsed_s:.1f}s  {r.reason[:70]}")

    result = run_smoke(tasks, env=env, auth_dir=lab.auth_dir, reset=reset, sites=wanted, agent=agent,
                       report_dir=Path(report_dir), progress=progress, judge=Judge.from_env(), max_parallel=parallel,
                       task_set=task_set)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(format_table(result))
        click.echo(f"report: {Path(report_dir) / 'report.html'}")
    if not result.ok:
        sys.exit(1)


# -- cloud lab -------------------------------------------------------------------------------------
@cli.group()
def cloud() -> None:
    """A lab of EC2 hosts (boto3) or SSH hosts, configured by Ansible, each running envctl."""


def _duration_minutes(text: str) -> int:
    from envctl.auth import parse_duration
    from envctl.errors import UsageError

    try:
        return max(1, int(parse_duration(text) // 60))
    except ValueError as exc:
        raise UsageError(f"invalid --ttl '{text}': {exc}", "use e.g. 90m, 8h or 2d") from None


@cloud.command("up")
@click.option("--lab", required=True, help="lab name (tags every resource)")
@click.option("--hosts", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--region", default=None, envvar="AWS_REGION", help="AWS region (AWS_REGION)")
@click.option("--instance-type", default="t3a.xlarge", show_default=True)
@click.option("--ami", default="webarena", show_default=True, help="webarena | ubuntu | an AMI id")
@click.option("--allow-cidr", "allow_cidrs", multiple=True, help="CIDR allowed to reach SSH and the sites (repeat)")
@click.option("--allow-world", is_flag=True, help="allow 0.0.0.0/0 (refused otherwise)")
@click.option("--key-name", default=None, help="use your EC2 key pair instead of creating one")
@click.option("--spot", is_flag=True)
@click.option("--ttl", default="8h", show_default=True, help="hosts terminate themselves after this")
@click.option("--sites", default="all", show_default=True, help="comma-separated sites, or all")
@click.option("--flavor", default="full", show_default=True)
@click.option("--inventory", "inventory_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="configure these SSH hosts (Ansible INI/YAML inventory) instead of creating EC2 hosts")
@click.option("--images-url", default="", help="S3/HTTP copy of the images for 'envctl images import'")
@json_option
@handle_errors
def cloud_up(lab: str, hosts: int, region: str | None, instance_type: str, ami: str, allow_cidrs: tuple[str, ...],
             allow_world: bool, key_name: str | None, spot: bool, ttl: str, sites: str, flavor: str,
             inventory_file: str | None, images_url: str, as_json: bool) -> None:
    """Create the hosts (or take --inventory), prepare them with Ansible, run envctl up + serve on each."""
    from dataclasses import asdict

    from envctl.errors import UsageError
    from envctl.provision import ec2 as ec2mod
    from envctl.provision import lab as labmod
    from envctl.render import emit_json, err_console

    say = (lambda m: None) if as_json else (lambda m: err_console.print(m))
    if inventory_file:
        manifest, play = labmod.up_inventory(lab, inventory_file=Path(inventory_file), flavor=flavor, sites=sites,
                                             images_url=images_url, progress=say)
    else:
        if not region:
            raise UsageError("no AWS region given", "pass --region (e.g. us-east-2) or set AWS_REGION")
        sizing = labmod.lab_sizing(None if sites == "all" else sites.split(","), flavor, ami=ami, extra_ports=(7565,))
        spec = ec2mod.Ec2LabSpec(lab=lab, region=region, hosts=hosts, instance_type=instance_type, ami=ami,
                                 ports=sizing.ports, allow_cidrs=allow_cidrs, allow_world=allow_world,
                                 key_name=key_name, spot=spot, ttl_minutes=_duration_minutes(ttl),
                                 root_gb=sizing.root_gb, data_gb=sizing.data_gb)
        manifest, play = labmod.up_ec2(spec, flavor=flavor, sites=sites, images_url=images_url, progress=say)
    failures = play.failures if play else []
    if as_json:
        emit_json({"lab": lab, "manifest": asdict(manifest),
                   "failures": [asdict(f) for f in failures]})
    else:
        for f in failures:
            click.echo(f"error: host {f.host} failed at task '{f.task}': {f.output[-300:]}", err=True)
        click.echo(f"lab '{lab}': {len(manifest.hosts) - len(failures)} of {len(manifest.hosts)} hosts ready")
    if failures:
        sys.exit(1)


@cloud.command("status")
@click.option("--lab", required=True)
@json_option
@handle_errors
def cloud_status(lab: str, as_json: bool) -> None:
    """Hosts, state, health, TTL left and cost so far."""
    from dataclasses import asdict

    from envctl.provision import lab as labmod
    from envctl.render import emit_json, table

    st = labmod.status(lab)
    if as_json:
        return emit_json(asdict(st))
    table(f"lab {lab}: ${st.total_cost_usd:.2f} so far (prices: {st.price_snapshot})",
          ["host", "address", "state", "type", "ready", "ttl left", "cost", "error"],
          [[h.name, h.address, h.state, h.instance_type, "yes" if h.ready else "no",
            f"{h.time_left_minutes:.0f} min" if h.time_left_minutes is not None else "-",
            f"${h.cost_usd:.2f}" if h.cost_usd is not None else "-", h.error or ""] for h in st.hosts])


@cloud.command("env")
@click.option("--lab", required=True)
@click.option("--format", "fmt", type=click.Choice(["json", "browsergym", "agentlab"]), default="json", show_default=True)
@handle_errors
def cloud_env(lab: str, fmt: str) -> None:
    """One URL set per host, for parallel workers."""
    from envctl.provision import lab as labmod
    from envctl.render import emit_json

    emit_json(labmod.env(lab, fmt))


@cloud.command("reset")
@click.option("--lab", required=True)
@click.argument("site_names", nargs=-1, metavar="[SITE]...")
@handle_errors
def cloud_reset(lab: str, site_names: tuple[str, ...]) -> None:
    """envctl reset on every host of the lab, in parallel."""
    from envctl.provision import lab as labmod

    res = labmod.reset(lab, list(site_names))
    for f in res.failures:
        click.echo(f"error: host {f.host} failed at task '{f.task}': {f.output[-300:]}", err=True)
    if res.failures:
        sys.exit(1)


@cloud.command("down")
@click.option("--lab", required=True)
@click.option("--region", default=None, envvar="AWS_REGION")
@handle_errors
def cloud_down(lab: str, region: str | None) -> None:
    """Terminate everything tagged with the lab; delete the group and key pair it created. Nothing else."""
    from envctl.provision import lab as labmod

    labmod.down(lab, region=region, progress=lambda m: click.echo(m, err=True))


def main() -> None:
    cli(prog_name="envctl")


if __name__ == "__main__":
    main()
