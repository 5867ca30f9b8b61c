"""envctl reset, verify and snapshot, and the detached refill worker."""
from __future__ import annotations


import click
from dataclasses import asdict

from envctl.cli.core import (Ctx, exit_unless, auth_dir_option, cli, instance_option, json_option, pass_ctx, sites_argument)
from envctl.errors import EnvctlError
from envctl.validate import TIER_WORDS


# -- state: reset, verify, snapshots, reset server ------------------------------------------------
@cli.command()
@sites_argument
@click.option("--all", "all_sites", is_flag=True, help="every site that is up")
@click.option("--tier", type=click.Choice(TIER_WORDS), default=None,
              help="start at this tier instead of the catalog's (the tiers envctl has)")
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
    exit_unless(all(r.ok for r in results))


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
    exit_unless(res.ok)


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

    # SIGTERM unwinds as Ctrl-C does (cli.core.sigterm_unwinds): a site frozen for the commit is unpaused
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


@cli.command("_ready", hidden=True)
@click.argument("site_names", nargs=-1)
@instance_option
@auth_dir_option
@pass_ctx
def ready_worker(ctx: Ctx, site_names: tuple[str, ...], instance: str, auth_dir: str | None) -> None:
    """Internal: remove dirty copies and boot the ready copies (spares, warm copies) SITES keep; run detached by
    reset, up and snapshot restore."""
    import signal

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(143)  # unwinds: the copy being booted is removed ('envctl down' sends this)

    signal.signal(signal.SIGTERM, stop)
    names = ctx.catalog.resolve(list(site_names))  # a wrong name or instance is refused at once, never retried
    failed = ctx.lab(instance, auth_dir).refill(names, progress=lambda s, p, d: click.echo(f"[{s}] {p}: {d}"))
    if failed:
        raise EnvctlError(f"no ready copy booted for {', '.join(failed)} after every retry",
                          "the next reset of these sites uses a slower tier; see 'envctl status'")
