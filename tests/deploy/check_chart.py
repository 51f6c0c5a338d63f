#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_chart.py - assertions on charts/sluice's rendered manifests.

Called by tests/deploy/test_chart.sh with the output of `helm template`:

  check_chart.py common FILE            what every render must satisfy
  check_chart.py all FILE ALERTS        the every-option render (values-all.yaml)
  check_chart.py per-stage FILE         the render of per-stage distinct values
  check_chart.py netpol FILE EXTERNAL [legacy]
                                        the NetworkPolicies: one per stage and
                                        one for the topics Job, ingress only to
                                        the ports a stage serves, egress beyond
                                        the cluster only for the stages named in
                                        EXTERNAL (comma-separated), the metadata
                                        addresses excepted from every /0 block;
                                        legacy: egress.rules in values may open
                                        more to every pod (not checked per stage)
  check_chart.py conf FILE DIR          write each stage's sluice.conf and env
                                        names into DIR (for the real binary)

Kubernetes' own kinds are validated against the Kubernetes schemas by
kubernetes-validate in test_chart.sh; the CRD kinds (ServiceMonitor,
PrometheusRule, ScaledObject) are checked here field by field.
Exit 0 when every check holds, 1 with one line per failure otherwise.
"""
import json
import os
import re
import subprocess
import sys

import yaml

STORAGE_STAGES = ("presign", "ingest", "preflight", "stt", "erase")

HTTP = {"presign": 8080, "results": 8081}
SECRET_WORDS = re.compile(r"(KEY|SECRET|PASSWORD|TOKEN)$")

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
    return cond


def load(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    return docs


def by_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def stage_of(d):
    return d["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def conf_of(docs, stage):
    for cm in by_kind(docs, "ConfigMap"):
        if stage_of(cm) == stage:
            text = cm["data"]["sluice.conf"]
            out = {}
            for line in text.splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                k, _, v = line.partition("=")
                check(k.strip() not in out, f"{stage}: key {k.strip()} set twice in sluice.conf")
                out[k.strip()] = v.strip()
            return out
    failures.append(f"{stage}: no ConfigMap")
    return {}


def pipeline_of(docs):
    """The pipeline description every stage's ConfigMap carries (one and the same)."""
    texts = {cm["data"].get("pipeline.json") for cm in by_kind(docs, "ConfigMap")}
    if not check(len(texts) == 1 and None not in texts,
                 f"the ConfigMaps carry {len(texts)} different pipeline.json"):
        return {"stages": [], "topics": [], "dead_letters": {}, "retry_tiers": []}
    return json.loads(texts.pop())


def stages_of(docs):
    return [st["name"] for st in pipeline_of(docs)["stages"]]


def consumers_of(docs):
    return {st["name"]: st["inputs"] for st in pipeline_of(docs)["stages"] if st["inputs"]}


def pipeline_topics(docs, pipeline_file):
    """What `sluice pipeline --topics` says the pipeline needs (the real
    binary, SLUICE_BIN), or the same derived here when it is not given."""
    p = pipeline_of(docs)
    binary = os.environ.get("SLUICE_BIN")
    if binary and os.access(binary, os.X_OK):
        with open(pipeline_file, "w") as f:
            f.write(json.dumps(p))
        out = subprocess.run([binary, "pipeline", "--topics", "--file", pipeline_file],
                             capture_output=True, text=True)
        check(out.returncode == 0, f"sluice pipeline refuses the chart's pipeline: {out.stderr}")
        return out.stdout.split()
    names = [t["name"] for t in p["topics"]] + [p["dead_letters"]["topic"], p["dead_letters"]["audit"]]
    for st in p["stages"]:
        if st.get("retry"):
            names += [f"{st['name']}.retry.{t}" for t in p["retry_tiers"]]
    return names


def deployments(docs):
    return {stage_of(d): d for d in by_kind(docs, "Deployment")}


def container(dep):
    cs = dep["spec"]["template"]["spec"]["containers"]
    check(len(cs) == 1, f"{dep['metadata']['name']}: {len(cs)} containers")
    return cs[0]


def check_common(docs):
    deps = deployments(docs)
    STAGES = stages_of(docs)
    check(sorted(deps) == sorted(STAGES), f"Deployments for {sorted(deps)}, want the pipeline's {STAGES}")
    for stage, dep in deps.items():
        name = dep["metadata"]["name"]
        pod = dep["spec"]["template"]["spec"]
        c = container(dep)
        conf = conf_of(docs, stage)
        check(c["args"][:4] == ["stage", stage, "--config", "/etc/sluice/sluice.conf"],
              f"{name}: args start {c['args'][:4]}")
        check(pod.get("enableServiceLinks") is False,
              f"{name}: enableServiceLinks must be false (service links are SLUICE_* variables)")
        check(pod.get("automountServiceAccountToken") is False, f"{name}: token mounted")
        sc = c.get("securityContext", {})
        check(sc.get("readOnlyRootFilesystem") is True, f"{name}: root filesystem writable")
        check(sc.get("allowPrivilegeEscalation") is False, f"{name}: privilege escalation")
        check(pod["securityContext"].get("runAsNonRoot") is True, f"{name}: may run as root")
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        check("/tmp" in mounts, f"{name}: no writable /tmp")
        check(mounts.get("/etc/sluice", {}).get("readOnly") is True, f"{name}: config not mounted read-only")
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        admin = conf.get("admin.listen", "")
        check(admin == f"0.0.0.0:{ports.get('admin')}",
              f"{name}: admin.listen {admin!r} is not the admin port {ports.get('admin')}")
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                            ("startupProbe", "/healthz")):
            g = c.get(probe, {}).get("httpGet", {})
            check(g.get("path") == path and g.get("port") == "admin",
                  f"{name}: {probe} is {g}, want {path} on the admin port")
        if stage in HTTP:
            check(ports.get("http") == HTTP[stage], f"{name}: http port {ports.get('http')}")
            check(conf.get(f"{stage}.listen") == f"0.0.0.0:{HTTP[stage]}",
                  f"{name}: {stage}.listen is {conf.get(stage + '.listen')}")
        else:
            check("http" not in ports, f"{name}: a consumer stage exposes an http port")
        # the grace period covers the preStop wait and the drain bound
        drain = int(conf.get("stage.drain_timeout_s", "0"))
        pre = 0
        ps = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
        if ps:
            pre = int(ps[-1])
        grace = pod.get("terminationGracePeriodSeconds", 30)
        check(drain > 0 and grace > pre + drain,
              f"{name}: terminationGracePeriodSeconds {grace} does not cover preStop {pre} + drain {drain}")
        # credentials only from Secrets
        for e in c.get("env", []):
            if SECRET_WORDS.search(e["name"]) or e["name"] == "SLUICE_REDIS_URL":
                check("value" not in e and "secretKeyRef" in e.get("valueFrom", {}),
                      f"{name}: {e['name']} is not read from a Secret")
        for k in conf:
            check(not re.search(r"(api_key|secret_key|access_key|password|token|secret)$", k),
                  f"{name}: credential {k} inlined in the ConfigMap")
        # S3 credentials only where they are used
        names = {e["name"] for e in c.get("env", [])}
        has_s3 = "SLUICE_S3_SECRET_KEY" in names
        # the stages that touch storage: presign signs, ingest HEADs the
        # upload, preflight (a plugin step) and stt fetch it
        check(has_s3 == (stage in STORAGE_STAGES),
              f"{name}: S3 secret key {'given' if has_s3 else 'missing'}")
        check(("s3.endpoint" in conf) == (stage in STORAGE_STAGES), f"{name}: s3 settings")
        if stage in ("stt", "grade"):
            check(f"{stage}.plugin" in conf, f"{name}: no {stage}.plugin")
    # services for the APIs only
    api = {stage_of(s) for s in by_kind(docs, "Service")
           if not s["metadata"]["name"].endswith("-metrics")}
    check(api == {"presign", "results"}, f"API Services for {sorted(api)}")
    # the topics hook Job
    jobs = by_kind(docs, "Job")
    if check(len(jobs) == 1, f"{len(jobs)} Jobs, want the topics hook"):
        job = jobs[0]
        hooks = job["metadata"]["annotations"].get("helm.sh/hook", "")
        check(set(hooks.split(",")) == {"pre-install", "pre-upgrade"}, f"topics Job hooks {hooks!r}")
        script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
        topics = {}
        for line in script.splitlines():
            words = [w.strip("'") for w in line.split()]
            if not words:
                continue
            check(words[:3] == ["sluicectl", "topics", "ensure"], f"topics Job line {line!r}")
            cfg = [words[i + 1] for i, w in enumerate(words) if w == "--config"]
            topics[words[-1]] = {"configs": cfg,
                                 "partitions": int(words[words.index("--partitions") + 1]),
                                 "replication": int(words[words.index("--replication") + 1])}
        # replicated topics take writes (acks=all) only once two replicas have
        # them: min.insync.replicas 2 wherever the replication is 3 or more
        # (the chart's default; values-all.yaml sets it in topics.config)
        for name, t in topics.items():
            if t["replication"] >= 3:
                check("min.insync.replicas=2" in t["configs"],
                      f"topic {name!r} (replication {t['replication']}) without min.insync.replicas=2: {t['configs']}")
        # compaction would keep a late lower status over DONE: a rebuilt view
        # must see every status (docs/architecture.md, "Delivery guarantees")
        for t in pipeline_of(docs)["topics"]:
            if t["message"] == "sluice.v1.QuestionStatus":
                check("cleanup.policy=delete" in topics.get(t["name"], {}).get("configs", []),
                      f"status topic {t['name']!r} is not cleanup.policy=delete: {topics.get(t['name'])}")
        # exactly the topics the pipeline needs (as the stages resolve them)
        want = pipeline_topics(docs, os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                  f"check_chart.{os.getpid()}.json"))
        check(sorted(topics) == sorted(want),
              f"the topics Job creates {sorted(set(topics) ^ set(want))} differently from the pipeline")
        for stage, dep in deps.items():
            check(conf_of(docs, stage).get("pipeline.file") == "/etc/sluice/pipeline.json",
                  f"{stage}: pipeline.file is not the mounted pipeline.json")
    return deps


def check_all(docs, alerts_path):
    deps = check_common(docs)
    # the derived objects' bucket and endpoint reach every stage with storage
    present = {stage_of(cm) for cm in by_kind(docs, "ConfigMap")}
    check(len(present & set(STORAGE_STAGES)) >= 3, f"storage stages rendered: {present}")
    for stage in present & set(STORAGE_STAGES):
        conf = conf_of(docs, stage)
        check(conf.get("s3.derived_bucket") == "speaking-derived"
              and conf.get("s3.derived_endpoint") == "https://0123456789abcdef.r2.cloudflarestorage.com",
              f"{stage}: s3.derived_bucket/derived_endpoint {conf.get('s3.derived_bucket')} "
              f"{conf.get('s3.derived_endpoint')}")
    kinds = {d["kind"] for d in docs}
    for k in ("Ingress", "HorizontalPodAutoscaler", "ScaledObject", "ServiceMonitor",
              "PrometheusRule", "NetworkPolicy", "PodDisruptionBudget"):
        check(k in kinds, f"every-option render has no {k}")
    # KEDA: a kafka trigger per input topic on the stage's group, one per
    # retry tier on its retry group (they wake the stage; their persistent
    # lag, retries waiting for their delay, does not count), and with
    # actionableLag a Prometheus trigger on the actionable lag, the kafka
    # triggers then only waking the stage
    keda = {stage_of(d): d for d in by_kind(docs, "ScaledObject")}
    pipeline = pipeline_of(docs)
    retrying = {st["name"] for st in pipeline["stages"] if st.get("retry")}
    actionable = set()
    hpa = {stage_of(d): d for d in by_kind(docs, "HorizontalPodAutoscaler")}
    check(not set(keda) & set(hpa), f"stages with both HPA and KEDA: {set(keda) & set(hpa)}")
    for stage, so in keda.items():
        CONSUMERS = consumers_of(docs)
        check(stage in CONSUMERS, f"ScaledObject for non-consumer {stage}")
        check(so["apiVersion"] == "keda.sh/v1alpha1", f"{stage}: ScaledObject apiVersion")
        spec = so["spec"]
        check(spec["scaleTargetRef"]["name"] == deps[stage]["metadata"]["name"],
              f"{stage}: ScaledObject targets {spec['scaleTargetRef']}")
        check(isinstance(spec["minReplicaCount"], int) and isinstance(spec["maxReplicaCount"], int)
              and spec["minReplicaCount"] <= spec["maxReplicaCount"], f"{stage}: replica counts")
        check("replicas" not in deps[stage]["spec"], f"{stage}: fixed replicas under KEDA")
        got, got_retry, prom = [], [], []
        for t in spec["triggers"]:
            m = t["metadata"]
            check(all(isinstance(v, str) for v in m.values()), f"{stage}: KEDA metadata must be strings")
            check(t["type"] in ("kafka", "prometheus"), f"{stage}: trigger {t['type']}")
            if t["type"] == "prometheus":
                prom.append(t)
                continue
            check(m["bootstrapServers"] == conf_of(docs, stage)["kafka.brokers"],
                  f"{stage}: KEDA brokers differ from the stage's")
            check(m["offsetResetPolicy"] == "earliest", f"{stage}: offsetResetPolicy {m['offsetResetPolicy']}")
            if m["consumerGroup"] == f"sluice-{stage}-retry":
                got_retry.append(m["topic"])
                check(m.get("excludePersistentLag") == "true",
                      f"{stage}: retry trigger on {m['topic']} counts retries waiting for their delay")
            else:
                check(m["consumerGroup"] == f"sluice-{stage}", f"{stage}: group {m['consumerGroup']}")
                got.append(m["topic"])
        check(sorted(got) == sorted(CONSUMERS[stage]), f"{stage}: lag on {got}")
        tiers = [f"{stage}.retry.{t}" for t in pipeline["retry_tiers"]] if stage in retrying else []
        check(sorted(got_retry) in (sorted(tiers), []), f"{stage}: retry triggers on {got_retry}")
        if stage in retrying and not got_retry:  # values-all.yaml: retryTopics false for materialize only
            check(stage == "materialize", f"{stage}: no trigger wakes it for its retries")
        kafka = [t for t in spec["triggers"] if t["type"] == "kafka"]
        if prom:
            actionable.add(stage)
            m = prom[0]["metadata"]
            check(len(prom) == 1, f"{stage}: {len(prom)} prometheus triggers")
            check(m["serverAddress"].startswith("http"), f"{stage}: prometheus at {m['serverAddress']!r}")
            check(m["query"] == f'sum(sluice_consumer_lag_actionable_messages{{namespace="speaking",stage="{stage}"}})',
                  f"{stage}: query {m['query']!r}")
            check(int(m["threshold"]) < 10**6, f"{stage}: threshold {m['threshold']}")
            check(all(int(t["metadata"]["lagThreshold"]) >= 10**9 for t in kafka),
                  f"{stage}: with actionable lag the kafka triggers may still ask for replicas")
        else:
            check(all(int(t["metadata"]["lagThreshold"]) < 10**6 for t in kafka),
                  f"{stage}: kafka lag thresholds {[t['metadata']['lagThreshold'] for t in kafka]}")
    # the scale-down window where values set one (grade in values-all.yaml), the
    # HPA's default elsewhere (tools/autoscale reads the same field)
    windows = {s: so["spec"].get("advanced", {}).get("horizontalPodAutoscalerConfig", {})
               .get("behavior", {}).get("scaleDown", {}).get("stabilizationWindowSeconds")
               for s, so in keda.items()}
    check(windows.get("grade") == 120 and all(w is None for s, w in windows.items() if s != "grade"),
          f"scale-down stabilization windows {windows}, want grade 120 only")
    check(actionable == {"stt"}, f"actionable-lag triggers for {sorted(actionable)}, want stt")
    check(keda.get("stt", {}).get("spec", {}).get("minReplicaCount") == 0,
          "stt scales to zero in the every-option render (its retries must wake it)")
    for stage, h in hpa.items():
        check(h["spec"]["scaleTargetRef"]["name"] == deps[stage]["metadata"]["name"],
              f"{stage}: HPA target")
        check("replicas" not in deps[stage]["spec"], f"{stage}: fixed replicas under the HPA")
    # ServiceMonitor selects the metrics Services on their admin port
    sm = by_kind(docs, "ServiceMonitor")[0]
    sel = sm["spec"]["selector"]["matchLabels"]
    msvc = [s for s in by_kind(docs, "Service")
            if all(s["metadata"]["labels"].get(k) == v for k, v in sel.items())]
    check(sorted(stage_of(s) for s in msvc) == sorted(stages_of(docs)),
          f"ServiceMonitor selects {[s['metadata']['name'] for s in msvc]}")
    for s in msvc:
        check([p["name"] for p in s["spec"]["ports"]] == ["admin"], f"{s['metadata']['name']} ports")
    check([e["port"] for e in sm["spec"]["endpoints"]] == ["admin"] and
          sm["spec"]["endpoints"][0]["path"] == "/metrics", "ServiceMonitor endpoint")
    # PrometheusRule carries the alert file's groups unchanged
    pr = by_kind(docs, "PrometheusRule")[0]
    with open(alerts_path) as f:
        want = yaml.safe_load(f)["groups"]
    check(pr["spec"]["groups"] == want, "PrometheusRule groups differ from files/alerts.yaml")
    check(sum(len(g["rules"]) for g in want) > 0, "no alert rules")
    for g in pr["spec"]["groups"]:
        for r in g["rules"]:
            check(set(r) >= {"alert", "expr"} and set(r) <= {"alert", "expr", "for", "labels",
                                                              "annotations", "keep_firing_for"},
                  f"rule {r.get('alert')}: fields {sorted(r)}")
    # Ingress: create (Exact) to presign, poll (Prefix) to results
    ing = by_kind(docs, "Ingress")[0]
    paths = ing["spec"]["rules"][0]["http"]["paths"]
    route = {(p["path"], p["pathType"]): p["backend"]["service"]["name"] for p in paths}
    check(route.get(("/v1/submissions", "Exact")) == deps["presign"]["metadata"]["name"] and
          route.get(("/v1/submissions", "Prefix")) == deps["results"]["metadata"]["name"],
          f"Ingress routes {route}")
    check(conf_of(docs, "presign").get("presign.results_base_url") ==
          "https://" + ing["spec"]["rules"][0]["host"], "presign.results_base_url not the ingress host")
    # NetworkPolicies: one per stage, plus egress
    nps = by_kind(docs, "NetworkPolicy")
    check(sorted(stage_of(n) for n in nps if stage_of(n) not in (None, "topics")) == sorted(stages_of(docs)),
          "NetworkPolicy per stage")
    check(any("Egress" in n["spec"]["policyTypes"] for n in nps), "no egress NetworkPolicy")
    # plugin secrets reach the stage as the plugin's own variables
    for stage, var in (("stt", "SLUICE_STT_OPENAI_API_KEY"), ("grade", "SLUICE_GRADE_OPENAI_API_KEY")):
        env = {e["name"]: e for e in container(deps[stage]).get("env", [])}
        check(var in env and "secretKeyRef" in env[var]["valueFrom"], f"{stage}: {var} not from a Secret")
        check(conf_of(docs, stage).get(f"{stage}.plugin") == "openai", f"{stage}: plugin")


def check_per_stage(docs):
    """Rendered with stages.<s>.replicas = i+1, resources cpu (i+1)*100m and
    memory (i+1)*64Mi, args [--set, stage.workers=i+2], config
    stage.max_in_flight = (i+1)*10: each Deployment must show its own."""
    deps = deployments(docs)
    for i, stage in enumerate(stages_of(docs)):
        if not check(stage in deps, f"no Deployment for {stage}"):
            continue
        d = deps[stage]
        c = container(d)
        check(d["spec"].get("replicas") == i + 1, f"{stage}: replicas {d['spec'].get('replicas')}, want {i + 1}")
        req = c["resources"].get("requests", {})
        check(req.get("cpu") == f"{(i + 1) * 100}m" and req.get("memory") == f"{(i + 1) * 64}Mi",
              f"{stage}: requests {req}")
        check(c["resources"].get("limits", {}).get("memory") == f"{(i + 1) * 128}Mi",
              f"{stage}: limits {c['resources'].get('limits')}")
        check(c["args"] == ["stage", stage, "--config", "/etc/sluice/sluice.conf", "--set", f"stage.workers={i + 2}"],
              f"{stage}: args {c['args']}")
        check(conf_of(docs, stage).get("stage.max_in_flight") == str((i + 1) * 10),
              f"{stage}: stage.max_in_flight {conf_of(docs, stage).get('stage.max_in_flight')}")
        check(d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == stage,
              f"{stage}: pod labels")


METADATA = {"0.0.0.0/0": "169.254.169.254/32", "::/0": "fd00:ec2::254/128"}
WORLD = re.compile(r"^(0\.0\.0\.0|::)/0$")


def peers_of(rule):
    """The peers of an ingress (from) or egress (to) rule; None: everyone."""
    return rule.get("to", rule.get("from")) or None


def check_netpol(docs, external, legacy=False):
    """The NetworkPolicies of a render with networkPolicy on (the default)."""
    nps = by_kind(docs, "NetworkPolicy")
    STAGES = stages_of(docs)
    per = {}
    for n in nps:
        per.setdefault(stage_of(n), []).append(n)
    for comp in STAGES + ["topics"]:
        check(len(per.get(comp, [])) == 1,
              f"{comp}: {len(per.get(comp, []))} NetworkPolicies, want exactly one selecting its pods")
    for comp, lst in per.items():
        check(comp in STAGES or comp == "topics", f"a NetworkPolicy for {comp!r}, neither a stage nor topics")
        for n in lst:
            name = n["metadata"]["name"]
            spec = n["spec"]
            check(spec["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/component") == comp,
                  f"{name}: selects {spec['podSelector']}, not the {comp} pods alone")
            check(sorted(spec.get("policyTypes", [])) == (["Egress"] if comp == "topics" else ["Egress", "Ingress"]),
                  f"{name}: policyTypes {spec.get('policyTypes')}")
            # the metadata addresses: excepted from every block that spans the world
            for kind in ("ingress", "egress"):
                for r in spec.get(kind, []):
                    peers = peers_of(r)
                    if kind == "egress":
                        check(peers is not None, f"{name}: an egress rule to every address "
                              f"(metadata included): {r}")
                    for p in peers or []:
                        b = p.get("ipBlock")
                        if b and WORLD.match(b["cidr"]):
                            check(METADATA[b["cidr"]] in b.get("except", []),
                                  f"{name}: {kind} ipBlock {b['cidr']} without except {METADATA[b['cidr']]}: {b}")
            # ingress: the API port only where a stage serves one, the admin port
            ports = sorted(p["port"] for r in spec.get("ingress", []) for p in r.get("ports", []))
            want = sorted(["admin"] + (["http"] if comp in HTTP else [])) if comp != "topics" else []
            check(ports == want, f"{name}: ingress to ports {ports}, want {want}")
            for r in spec.get("ingress", []):
                check(peers_of(r) is not None or any(p["port"] == "http" for p in r["ports"]),
                      f"{name}: the admin port open to everyone: {r}")
            # egress beyond the cluster (a /0 block) only for the stages that call out
            world = [p["ipBlock"]["cidr"] for r in spec.get("egress", []) for p in (peers_of(r) or [])
                     if "ipBlock" in p and WORLD.match(p["ipBlock"]["cidr"])
                     and not (r.get("ports") and {x.get("port") for x in r["ports"]} == {53})]
            if comp in external:
                check("0.0.0.0/0" in world, f"{name}: {comp} may not reach beyond the cluster ({world})")
            elif not legacy:
                check(not world, f"{name}: {comp} may reach beyond the cluster: {world}")
            if comp not in external and not legacy:
                for r in spec.get("egress", []):
                    check(r.get("ports"), f"{name}: an egress rule on every port: {r}")
                eports = {p.get("port") for r in spec.get("egress", []) for p in r.get("ports", [])}
                if comp not in STORAGE_STAGES and comp != "topics":
                    check(443 not in eports, f"{name}: {comp} touches no storage but may reach port 443")
            if comp != "topics":
                dns = [r for r in spec.get("egress", []) if {p.get("port") for p in r.get("ports", [])} == {53}]
                check(dns, f"{name}: no DNS egress")


def write_conf(docs, outdir):
    for stage, dep in deployments(docs).items():
        for cm in by_kind(docs, "ConfigMap"):
            if stage_of(cm) == stage:
                with open(os.path.join(outdir, f"{stage}.conf"), "w") as f:
                    f.write(cm["data"]["sluice.conf"])
                with open(os.path.join(outdir, "pipeline.json"), "w") as f:
                    f.write(cm["data"]["pipeline.json"])
        with open(os.path.join(outdir, f"{stage}.env"), "w") as f:
            for e in container(dep).get("env", []):
                f.write(e["name"] + "\n")


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    mode, docs = sys.argv[1], load(sys.argv[2])
    if mode == "common":
        check_common(docs)
    elif mode == "all":
        check_all(docs, sys.argv[3])
    elif mode == "per-stage":
        check_per_stage(docs)
    elif mode == "netpol":
        check_netpol(docs, [x for x in sys.argv[3].split(",") if x], sys.argv[4:] == ["legacy"])
    elif mode == "conf":
        write_conf(docs, sys.argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"check_chart {mode}: ok ({len(docs)} objects)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
