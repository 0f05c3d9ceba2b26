"""The approval gate's text, rendered from the templates in `planner/airflow/templates/`.

The wording lives in the templates; this module picks one and hands it the plan. Three texts: the plan in one line
(the gate's subject, and every notification's), the plan's summary in Markdown (the commit task's XCom), and what
the gate asks the reviewer (the summary, the configuration and release the plan used where it differs from Pulsar's
defaults, the action hash the decision binds, and why no approval policy approved the plan). The summary opens with
a warning when the brokers' own load shedding or splitting was on beside what the plan does. Jinja comes with the
airflow extra, as does everything that shows these texts.
"""

from __future__ import annotations

from functools import cache

from jinja2 import Environment, PackageLoader, StrictUndefined

from planner.plan.configuration import controller_text, release_text, shown_configuration
from planner.plan.document import PlanDocument


def plan_subject(plan: PlanDocument) -> str:
    """One line naming what the plan does, for the gate and notifications."""
    return _environment().get_template("plan_subject.txt.j2").render(plan=plan)


def plan_summary_markdown(plan: PlanDocument, plan_url: str) -> str:
    """The plan's summary: its actions, the predicted per-broker load and the AvgShedder pairs that fired."""
    return _render("plan_summary.md.j2", plan=plan, subject=plan_subject(plan), plan_url=plan_url)


def approval_request_markdown(plan: PlanDocument, plan_url: str, plan_id: int, why_not: str | None) -> str:
    """What the gate puts to the reviewer: the summary, then the plan id and the action hash the decision binds, then
    `why_not` (why no approval policy approved the plan) when the cluster has policies."""
    return _render(
        "approval_request.md.j2",
        plan=plan,
        subject=plan_subject(plan),
        plan_url=plan_url,
        plan_id=plan_id,
        why_not=why_not,
    )


def _render(name: str, **values: object) -> str:
    # A template's last line ends in a newline, as a text file's does; the gate's Markdown ends without one.
    return _environment().get_template(name).render(**values).removesuffix("\n")


def _fixed(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


def _measured(value: float | None) -> str:
    """An action's msg/s or bytes/s; a dash where it was not measured (0 is a measured idle bundle)."""
    return "—" if value is None else _fixed(value, 0)


@cache
def _environment() -> Environment:
    # Markdown, not HTML: nothing to escape. StrictUndefined: a plan field renamed under the templates fails the
    # render instead of leaving a blank cell. Blocks trimmed: a line holding only a tag leaves no line behind.
    environment = Environment(
        loader=PackageLoader("planner.airflow", "templates"),
        autoescape=False,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    environment.filters["fixed"] = _fixed
    environment.filters["measured"] = _measured
    environment.filters["controller"] = controller_text
    environment.filters["release_text"] = release_text
    environment.filters["shown_configuration"] = shown_configuration
    return environment
