"""The traces zip of a job: a manifest and one JSON document per seed."""

from __future__ import annotations

import io
import json
import zipfile

from django.http import HttpResponse

from jobs import selectors
from jobs.models import EvalJob


def job_traces_response(*, job: EvalJob) -> HttpResponse:
    summary, rows = selectors.job_results(job=job)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        files = []
        for row in rows:
            name = f"seeds/seed_{row['seed']}.json"
            files.append(name)
            zf.writestr(name, json.dumps({"job_id": job.id, **row}, indent=2, default=str))
        manifest = {"job_id": job.id, "status": job.status, "summary": summary, "files": files}
        zf.writestr("manifest.json", json.dumps(manifest, indent=2, default=str))
    response = HttpResponse(buffer.getvalue(), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{job.id}-traces.zip"'
    return response
