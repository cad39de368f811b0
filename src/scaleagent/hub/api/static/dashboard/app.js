// The hub's dashboard (docs/dashboard.md): one page reading the hub's REST API with the
// caller's own credentials. Polls the lists every POLL_MS and follows the multi-cluster watch
// (Server-Sent Events, read with fetch so that it can carry the Authorization header).
import { h, render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import htm from "htm";
import { LineChart, Window } from "./charts.js";
import { toYaml } from "./yaml.js";

const html = htm.bind(h);
const POLL_MS = 2000;
const RETRY_MS = 3000;
const TOKEN_KEY = "scale-agent-token";
const MAX_CHANGES = 30;
const MAX_RESULTS = 200;
const REFUSED_MS = 60000; // how long a source that answered 403 is left alone

// The API, relative to the page (so the dashboard also works behind a path-prefixing proxy).
const SOURCES = {
  accounts: "api/v1/accounts",
  agents: "armory/agents",
  replicas: "armory/clouddrivers",
  dynamic: "armory/accounts",
  stats: "api/v1/stats",
  tasks: "task?limit=20",
};

// --- talking to the hub ---------------------------------------------------------------------

const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

function headers(extra = {}) {
  return token() ? { ...extra, Authorization: `Bearer ${token()}` } : extra;
}

/** {status, ok, doc, error}: never throws, so one failing request cannot break the page. */
async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  try {
    const response = await fetch(path, init);
    const text = await response.text();
    let doc = null;
    try {
      doc = text ? JSON.parse(text) : null;
    } catch {
      doc = text;
    }
    const error = response.ok ? "" : (doc && doc.error) || `${response.status} ${response.statusText}`;
    return { status: response.status, ok: response.ok, doc, error };
  } catch (e) {
    return { status: 0, ok: false, doc: null, error: `the hub did not answer (${e.message})` };
  }
}

/** Reads the watch until it ends; calls onEvent({type, account, kind, ...}) per change. */
async function followWatch(signal, onEvent, onOpen) {
  const response = await fetch("api/v1/watch", { headers: headers(), signal });
  if (!response.ok) {
    const doc = await response.json().catch(() => null);
    throw new Error((doc && doc.error) || `${response.status} ${response.statusText}`);
  }
  onOpen();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the hub ended the stream");
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      let data = "";
      for (const line of frame.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trim();
      } // lines starting with ":" are heartbeats
      if (!data) continue;
      const doc = JSON.parse(data);
      if (event === "error") throw new Error(doc.message);
      onEvent(doc);
    }
  }
}

// --- small helpers ---------------------------------------------------------------------------

const sum = (values) => values.reduce((a, b) => a + b, 0);
const fmt = (n) => (n == null ? "–" : Number(n).toLocaleString("en"));
const kindOf = (obj) => {
  const group = (obj.apiVersion || "").includes("/") ? obj.apiVersion.split("/")[0] : "";
  return group ? `${obj.kind}.${group}` : obj.kind;
};

function age(seconds) {
  if (seconds == null) return "never";
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  return `${Math.round(seconds / 3600)} h ago`;
}

function Panel({ id, title, note, children }) {
  return html`<section id=${id} class="panel">
    <h2>${title}${note ? html` <small>${note}</small>` : ""}</h2>
    ${children}
  </section>`;
}

/** The answer's error as a message in the panel (a 403 names the permission that is missing). */
function Problem({ answer, what }) {
  if (!answer || answer.ok || answer.status === null) return null;
  const kind = answer.status === 403 ? "forbidden" : "error";
  return html`<p class="message ${kind}" data-status=${answer.status}>${what}: ${answer.error}</p>`;
}

// --- panels ----------------------------------------------------------------------------------

function Login({ whoami, onToken }) {
  const [value, setValue] = useState("");
  const submit = (e) => {
    e.preventDefault();
    onToken(value.trim());
  };
  return html`<section id="login" class="panel">
    <h2>Log in</h2>
    <p>This hub needs a login. Paste a bearer token: a static token, or a Kubernetes token
    (<code>kubectl create token ...</code>). It is kept in this tab only (sessionStorage) and sent to this hub alone.</p>
    <form onSubmit=${submit}>
      <input id="token" type="password" autocomplete="off" placeholder="token" value=${value}
        onInput=${(e) => setValue(e.target.value)} />
      <button type="submit">Use token</button>
    </form>
  </section>`;
}

function Summary({ data, seen, rate }) {
  const accounts = data.accounts.ok ? data.accounts.doc : [];
  const objects = sum(accounts.map((a) => a.objects || 0));
  const stats = data.stats.ok ? data.stats.doc : null;
  return html`<div id="summary" class="cards">
    <div class="card"><b id="agents-count">${data.agents.ok ? data.agents.doc.length : "–"}</b> agents</div>
    <div class="card"><b id="replicas-count">${data.replicas.ok ? data.replicas.doc.length : "–"}</b> hub replicas</div>
    <div class="card"><b id="accounts-count">${accounts.length}</b> accounts</div>
    <div class="card"><b id="objects-total">${fmt(objects)}</b> cached objects</div>
    <div class="card"><b id="events-total">${fmt(seen)}</b> changes seen by this page</div>
    <div class="card"><b id="events-rate">${rate.toFixed(1)}</b> changes/s (last 10 s)</div>
    ${stats && html`<div class="card"><b id="hub-events">${fmt(stats.events)}</b> events applied by replica ${stats.replica}</div>`}
    ${stats && stats.watches != null &&
    html`<div class="card"><b id="watches">${fmt(stats.watchesEstablished)}/${fmt(stats.watches)}</b> watches established</div>`}
  </div>`;
}

function Agents({ answer }) {
  const agents = answer.ok ? answer.doc : [];
  return html`<${Panel} id="agents" title="Agents" note="connected sessions, every replica's">
    <${Problem} answer=${answer} what="agents" />
    ${answer.ok &&
    html`<table>
      <thead><tr><th>agent</th><th>zone</th><th>version</th><th>replica</th><th>connected</th><th>accounts</th><th>events</th><th>refused</th></tr></thead>
      <tbody>${agents.map(
        (a) => html`<tr data-agent=${a.agentId}>
          <td>${a.agentId}</td><td>${a.zoneId || "–"}</td><td>${a.agentVersion}</td><td>${a.replica}</td>
          <td>${new Date(a.connectedAt).toLocaleString()}</td><td>${a.accounts.join(", ")}</td><td>${fmt(a.events)}</td>
          <td>${Object.entries(a.rejectedAccounts || {}).map(([n, why]) => html`<div title=${why}>${n}</div>`)}</td>
        </tr>`,
      )}</tbody>
    </table>`}
  </${Panel}>`;
}

function Replicas({ answer }) {
  return html`<${Panel} id="replicas" title="Hub replicas">
    <${Problem} answer=${answer} what="replicas" />
    ${answer.ok &&
    html`<ul class="replicas">${answer.doc.map(
      (r) => html`<li data-replica=${r.id}><span class="dot ${r.ready ? "ok" : "bad"}"></span>
        <b>${r.id}</b> ${r.baseUrl} <small>${r.ready ? "ready" : "not ready"}</small></li>`,
    )}</ul>`}
  </${Panel}>`;
}

function Freshness({ freshness }) {
  if (!freshness) return html`<span class="muted">–</span>`;
  const stale = Object.entries(freshness.kinds || {}).filter(([, k]) => !k.watching).map(([k]) => k);
  return html`<span class=${stale.length ? "stale" : ""} title=${stale.length ? `not watching: ${stale.join(", ")}` : "every kind watched"}>
    ${age(freshness.lastEventAgeSeconds)}, watches ${freshness.watchesEstablished}/${freshness.watches}
  </span>`;
}

function Accounts({ data, admin, onChanged }) {
  const [message, setMessage] = useState(null);
  const present = data.accounts.ok ? data.accounts.doc : [];
  const dynamic = data.dynamic.ok ? data.dynamic.doc : [];
  const lifecycle = Object.fromEntries(dynamic.map((d) => [d.name, d]));
  const names = [...new Set([...present.map((a) => a.name), ...dynamic.map((d) => d.name)])].sort();
  const byName = Object.fromEntries(present.map((a) => [a.name, a]));

  async function act(name, state) {
    setMessage({ kind: "info", text: `${state === "ACTIVE" ? "activating" : "deactivating"} ${name}…` });
    const answer = await api(SOURCES.dynamic, { method: "PATCH", body: [{ name, state }] });
    setMessage(
      answer.ok
        ? { kind: "info", text: `${name}: ${answer.doc[0].state} (the hub goes on in the background; the table follows)` }
        : { kind: answer.status === 403 ? "forbidden" : "error", text: `${name}: ${answer.error}`, status: answer.status },
    );
    onChanged();
  }

  const note = data.dynamic.ok ? "" : data.dynamic.status === 403 ? "lifecycle and actions need the admin role" : "";
  return html`<${Panel} id="accounts" title="Accounts" note=${note}>
    <${Problem} answer=${data.accounts} what="accounts" />
    ${message && html`<p id="action-message" class="message ${message.kind}" data-status=${message.status}>${message.text}</p>`}
    <table>
      <thead><tr><th>account</th><th>presence</th><th>agent</th><th>lifecycle</th><th>server</th><th>API host</th>
        <th>objects</th><th>last change</th><th></th></tr></thead>
      <tbody>${names.map((name) => {
        const a = byName[name] || {};
        const d = lifecycle[name];
        const syncing = a.agentState === "syncing";
        return html`<tr data-account=${name} data-state=${a.state || ""} data-agent-state=${a.agentState || ""}>
          <td><b>${name}</b></td>
          <td><span class="badge ${a.state || "none"}">${a.state || "not served"}</span></td>
          <td><span class="badge ${a.agentState || "none"}" title=${a.reason || ""}>${a.agentState || "–"}</span>
            ${a.reason && html`<div class="reason">${a.reason}</div>`}</td>
          <td>${d ? html`<span class="badge ${d.state}" title=${d.errorMessage || ""}>${d.state}</span>` : html`<span class="muted">${data.dynamic.ok ? "static" : "–"}</span>`}</td>
          <td>${a.serverVersion || "–"}</td><td class="host">${a.apiHost || "–"}</td>
          <td><details><summary>${fmt(a.objects)}${syncing ? " so far (syncing)" : ""}</summary>
            <ul class="kinds">${Object.entries(a.objectsByKind || {}).sort().map(([k, n]) => html`<li>${k}: ${fmt(n)}</li>`)}</ul>
          </details></td>
          <td><${Freshness} freshness=${a.freshness} /></td>
          <td>${admin && d && html`
            ${d.state !== "ACTIVE" && html`<button class="activate" onClick=${() => act(name, "ACTIVE")}>Activate</button>`}
            ${d.state !== "INACTIVE" && html`<button class="deactivate" onClick=${() => act(name, "INACTIVE")}>Deactivate</button>`}`}</td>
        </tr>`;
      })}</tbody>
    </table>
  </${Panel}>`;
}

function Kinds({ answer }) {
  const accounts = answer.ok ? answer.doc : [];
  const totals = {};
  for (const a of accounts) for (const [k, n] of Object.entries(a.objectsByKind || {})) totals[k] = (totals[k] || 0) + n;
  const kinds = Object.entries(totals).sort((x, y) => y[1] - x[1]);
  const top = kinds.length ? kinds[0][1] : 1;
  return html`<${Panel} id="kinds" title="Objects per kind" note="every account">
    <table>
      <thead><tr><th>kind</th>${accounts.map((a) => html`<th>${a.name}</th>`)}<th>total</th><th></th></tr></thead>
      <tbody>${kinds.map(
        ([k, n]) => html`<tr data-kind=${k}><td>${k}</td>${accounts.map((a) => html`<td>${fmt((a.objectsByKind || {})[k] || 0)}</td>`)}
          <td><b>${fmt(n)}</b></td><td class="bar"><span style=${`width:${(100 * n) / top}%`}></span></td></tr>`,
      )}</tbody>
    </table>
  </${Panel}>`;
}

function Charts({ rateWindow, latencyWindow, version, stats }) {
  const latency = stats.ok && stats.doc.changeToCacheSeconds;
  return html`<${Panel} id="charts" title="Live">
    <div class="charts">
      <div><h3>Changes per second</h3><${LineChart} id="rate-chart" window=${rateWindow} version=${version} unit="changes/s" /></div>
      <div><h3>Change to cache (ms)</h3>
        ${stats.ok
          ? html`<${LineChart} id="latency-chart" window=${latencyWindow} version=${version} unit="ms" />
              <small>${fmt(latency && latency.count)} changes measured</small>`
          : html`<p class="muted" id="latency-unavailable">Not available from this hub (${stats.status === 404 ? "it has no /api/v1/stats" : stats.error || "waiting"}).</p>`}
      </div>
    </div>
  </${Panel}>`;
}

function Changes({ changes, watchState }) {
  return html`<${Panel} id="changes" title="Recent changes" note=${watchState}>
    <ol class="changes">${changes.map(
      (c) => html`<li data-account=${c.account} data-name=${c.name}>
        <span class="badge ${c.type}">${c.type}</span> <b>${c.kind}</b> ${c.namespace ? `${c.namespace}/` : ""}${c.name}${" "}
        <small>on ${c.account} at ${c.at}</small></li>`,
    )}</ol>
  </${Panel}>`;
}

function Search({ accounts }) {
  const [form, setForm] = useState({ account: "", kind: "", namespace: "", name: "", labelSelector: "" });
  const [results, setResults] = useState(null);
  const [selected, setSelected] = useState(null);
  const [asYaml, setAsYaml] = useState(true);
  const field = (key, placeholder) => html`<input id=${`search-${key}`} placeholder=${placeholder} value=${form[key]}
    onInput=${(e) => setForm({ ...form, [key]: e.target.value })} />`;

  async function search(e) {
    e.preventDefault();
    const names = form.account ? [form.account] : accounts.map((a) => a.name);
    const query = new URLSearchParams();
    for (const key of ["kind", "namespace", "name", "labelSelector"]) if (form[key].trim()) query.set(key, form[key].trim());
    setResults({ pending: true, items: [], notes: [] });
    setSelected(null);
    const answers = await Promise.all(
      names.map((n) => api(`api/v1/accounts/${encodeURIComponent(n)}/objects?${query}`).then((r) => [n, r])),
    );
    const items = [];
    const notes = [];
    for (const [account, r] of answers) {
      if (r.ok) items.push(...r.doc.items.map((obj) => ({ account, obj })));
      else if (r.doc && r.doc.reason === "UnknownKind") notes.push(`${account} follows no kind "${form.kind}"`);
      else notes.push(`${account}: ${r.error}`);
    }
    setResults({ pending: false, items, notes });
  }

  return html`<${Panel} id="search" title="Search every cluster">
    <form onSubmit=${search}>
      <select id="search-account" value=${form.account} onChange=${(e) => setForm({ ...form, account: e.target.value })}>
        <option value="">all accounts</option>
        ${accounts.map((a) => html`<option value=${a.name}>${a.name}</option>`)}
      </select>
      ${field("kind", "kind (Deployment, configmap...)")} ${field("namespace", "namespace")} ${field("name", "name")}
      ${field("labelSelector", "labels (app=web, tier in (a,b))")}
      <button type="submit">Search</button>
    </form>
    ${results && html`<div id="results" data-pending=${results.pending}>
      ${results.notes.map((n) => html`<p class="message note">${n}</p>`)}
      <p>${results.pending ? "searching…" : `${results.items.length} objects`}${results.items.length > MAX_RESULTS ? `, the first ${MAX_RESULTS} shown` : ""}</p>
      <table>
        <thead><tr><th>account</th><th>kind</th><th>namespace</th><th>name</th><th>labels</th></tr></thead>
        <tbody>${results.items.slice(0, MAX_RESULTS).map(
          (r) => html`<tr class="result" data-account=${r.account} data-name=${r.obj.metadata.name} onClick=${() => setSelected(r)}>
            <td>${r.account}</td><td>${kindOf(r.obj)}</td><td>${r.obj.metadata.namespace || "–"}</td>
            <td><a href="#object-view">${r.obj.metadata.name}</a></td>
            <td>${Object.entries(r.obj.metadata.labels || {}).map(([k, v]) => html`<span class="label">${k}=${v}</span>`)}</td>
          </tr>`,
        )}</tbody>
      </table>
    </div>`}
    ${selected && html`<div id="object-view">
      <h3>${kindOf(selected.obj)} ${selected.obj.metadata.namespace ? `${selected.obj.metadata.namespace}/` : ""}${selected.obj.metadata.name}${" "}
        <small>on ${selected.account}</small>
        <button onClick=${() => setAsYaml(!asYaml)}>${asYaml ? "JSON" : "YAML"}</button>
        <button onClick=${() => setSelected(null)}>close</button></h3>
      <pre class=${asYaml ? "yaml" : "json"}>${asYaml ? toYaml(selected.obj) : JSON.stringify(selected.obj, null, 2)}</pre>
    </div>`}
  </${Panel}>`;
}

function Tasks({ answer }) {
  const [open, setOpen] = useState(null);
  return html`<${Panel} id="tasks" title="Recent tasks" note="operations sent through the hub">
    <${Problem} answer=${answer} what="tasks" />
    ${answer.ok && answer.doc.length === 0 && html`<p class="muted">No task yet.</p>`}
    ${answer.ok && answer.doc.length > 0 &&
    html`<table>
      <thead><tr><th>started</th><th>task</th><th>state</th><th>last phase</th><th>accounts</th><th>user</th></tr></thead>
      <tbody>${answer.doc.map(
        (t) => html`<tr data-task=${t.id} data-state=${t.state} onClick=${() => setOpen(open === t.id ? null : t.id)}>
            <td>${new Date(t.startTimeMs).toLocaleString()}</td><td><code>${t.id.slice(0, 8)}</code></td>
            <td><span class="badge ${t.state}">${t.state}</span></td>
            <td>${t.status.phase}: ${t.status.status}${t.exception && html`<div class="reason">${t.exception.message}</div>`}</td>
            <td>${(t.accounts || []).join(", ")}</td><td>${t.user || "–"}</td>
          </tr>
          ${open === t.id && html`<tr class="history"><td colspan="6"><ol>${t.history.map(
            (p) => html`<li><small>${new Date(p.timestamp).toLocaleTimeString()}</small> <b>${p.phase}</b> ${p.status}</li>`,
          )}</ol></td></tr>`}`,
      )}</tbody>
    </table>`}
  </${Panel}>`;
}

// --- the page ----------------------------------------------------------------------------------

const EMPTY = { status: null, ok: false, doc: null, error: "" };

function App() {
  const [whoami, setWhoami] = useState(null);
  const [data, setData] = useState(Object.fromEntries(Object.keys(SOURCES).map((k) => [k, EMPTY])));
  const [changes, setChanges] = useState([]);
  const [watchState, setWatchState] = useState("connecting…");
  const [version, setVersion] = useState(0);
  const [refresh, setRefresh] = useState(0);
  const seen = useRef(0);
  const refused = useRef({});
  const windows = useRef({
    rate: new Window(["seen by this page", "applied by the hub"]),
    latency: new Window(["p50", "p90", "p99"]),
    lastSeen: [],
  });

  const login = async () => setWhoami(await api("api/v1/whoami"));
  useEffect(() => {
    login();
  }, []);
  const loggedIn = whoami && whoami.ok;

  // The lists, every POLL_MS (and at once after an action).
  useEffect(() => {
    if (!loggedIn) return;
    refused.current = {}; // another login, or an action: ask every source again
    let live = true;
    let timer;
    const poll = async () => {
      // A source that refused (403: the admin role) is asked again only every REFUSED_MS.
      const entries = await Promise.all(
        Object.entries(SOURCES).map(async ([k, path]) => {
          const last = refused.current[k];
          if (last && Date.now() - last.at < REFUSED_MS) return [k, last.answer];
          const answer = await api(path);
          if (answer.status === 403) refused.current[k] = { at: Date.now(), answer };
          else delete refused.current[k];
          return [k, answer];
        }),
      );
      if (!live) return;
      const next = Object.fromEntries(entries);
      setData(next);
      const latency = next.stats.ok && next.stats.doc.changeToCacheSeconds;
      if (latency) windows.current.latency.push(Date.now() / 1000, [latency.p50, latency.p90, latency.p99].map((s) => (s == null ? null : s * 1000)));
      if (next.accounts.status === 401) setWhoami(next.accounts); // the token was revoked: log in again
      timer = setTimeout(poll, POLL_MS);
    };
    poll();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [loggedIn, refresh]);

  // The watch: counted per second for the rate chart, kept as the list of recent changes.
  useEffect(() => {
    if (!loggedIn) return;
    const abort = new AbortController();
    let retry;
    const connect = () =>
      followWatch(
        abort.signal,
        (c) => {
          seen.current += 1;
          const at = new Date().toLocaleTimeString();
          setChanges((old) => [{ ...c, at }, ...old].slice(0, MAX_CHANGES));
        },
        () => setWatchState("live"),
      ).catch((e) => {
        if (abort.signal.aborted) return;
        setWatchState(`reconnecting: ${e.message}`);
        retry = setTimeout(connect, RETRY_MS);
      });
    connect();
    return () => {
      abort.abort();
      clearTimeout(retry);
    };
  }, [loggedIn]);

  // Once a second: a point on the rate chart.
  const hubRate = useRef(null);
  hubRate.current = data.stats.ok ? data.stats.doc.eventsPerSecond : null;
  useEffect(() => {
    if (!loggedIn) return;
    let last = seen.current;
    const timer = setInterval(() => {
      const w = windows.current;
      w.lastSeen = [...w.lastSeen, seen.current - last].slice(-10);
      last = seen.current;
      w.rate.push(Date.now() / 1000, [w.lastSeen[w.lastSeen.length - 1], hubRate.current]);
      setVersion((v) => v + 1);
    }, 1000);
    return () => clearInterval(timer);
  }, [loggedIn]);

  const saveToken = (value) => {
    sessionStorage.setItem(TOKEN_KEY, value);
    login();
  };
  const logout = () => {
    sessionStorage.removeItem(TOKEN_KEY);
    login();
  };

  if (whoami === null) return html`<p class="loading">Connecting to the hub…</p>`;
  const me = whoami.ok ? whoami.doc : null;
  const w = windows.current;
  const rate = w.lastSeen.length ? sum(w.lastSeen) / w.lastSeen.length : 0;
  return html`<header>
      <h1>Scale Agent hub</h1>
      ${me &&
      html`<span id="whoami">${me.authentication ? html`${me.name} <small>(${me.method}${me.admin ? ", admin" : ""})</small>` : "logins are off on this hub"}
        ${token() && html` <button id="logout" onClick=${logout}>Log out</button>`}</span>`}
    </header>
    ${!me && whoami.status === 401 && html`<${Login} whoami=${whoami} onToken=${saveToken} />`}
    ${!me && whoami.status !== 401 && html`<p class="message error">${whoami.error}</p>`}
    ${me &&
    html`<main>
      <${Summary} data=${data} seen=${seen.current} rate=${rate} />
      <div class="row"><${Agents} answer=${data.agents} /><${Replicas} answer=${data.replicas} /></div>
      <${Accounts} data=${data} admin=${me.admin} onChanged=${() => setRefresh((r) => r + 1)} />
      <div class="row"><${Charts} rateWindow=${w.rate} latencyWindow=${w.latency} version=${version} stats=${data.stats} />
        <${Changes} changes=${changes} watchState=${watchState} /></div>
      <${Kinds} answer=${data.accounts} />
      <${Search} accounts=${data.accounts.ok ? data.accounts.doc : []} />
      <${Tasks} answer=${data.tasks} />
    </main>`}`;
}

render(html`<${App} />`, document.getElementById("app"));
