// Airlock inbox: passkey ceremonies, signed grants and denies, live
// updates. No framework, no build step.
"use strict";

const b64u = {
  enc(buf) {
    const b = new Uint8Array(buf);
    let s = "";
    for (const c of b) s += String.fromCharCode(c);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  },
  dec(str) {
    const s = atob(str.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((str.length + 3) % 4));
    const b = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i);
    return b.buffer;
  },
};

function csrf() {
  const m = document.querySelector('meta[name="airlock-csrf"]');
  return m ? m.content : "";
}

function say(msg, bad) {
  const el = document.getElementById("status");
  if (!el) return;
  el.textContent = msg;
  el.classList.toggle("error", !!bad);
}

async function post(url, body) {
  const r = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Airlock-CSRF": csrf() },
    body: body === undefined ? "{}" : JSON.stringify(body),
  });
  let data = {};
  try { data = await r.json(); } catch (e) { /* empty body */ }
  if (!r.ok || data.code) {
    const err = new Error((data.code ? data.code + ": " : "") + (data.message || r.statusText));
    err.data = data;
    throw err;
  }
  return data;
}

function creationOptions(o) {
  const pk = o.publicKey;
  pk.challenge = b64u.dec(pk.challenge);
  pk.user.id = b64u.dec(pk.user.id);
  for (const c of pk.excludeCredentials || []) c.id = b64u.dec(c.id);
  return o;
}

function requestOptions(o) {
  const pk = o.publicKey;
  pk.challenge = b64u.dec(pk.challenge);
  for (const c of pk.allowCredentials || []) c.id = b64u.dec(c.id);
  return o;
}

async function enroll() {
  const token = location.pathname.split("/").pop();
  try {
    say("Follow your browser's passkey prompt…");
    const opts = creationOptions(await post("/enroll/" + token + "/begin"));
    const cred = await navigator.credentials.create(opts);
    const res = await post("/enroll/" + token + "/finish", {
      id: cred.id, rawId: b64u.enc(cred.rawId), type: cred.type,
      response: {
        clientDataJSON: b64u.enc(cred.response.clientDataJSON),
        attestationObject: b64u.enc(cred.response.attestationObject),
        transports: cred.response.getTransports ? cred.response.getTransports() : [],
      },
    });
    say("Passkey enrolled.");
    location.assign(res.next || "/");
  } catch (e) {
    say("Not enrolled: " + e.message, true);
  }
}

async function login(next) {
  try {
    say("Follow your browser's passkey prompt…");
    const opts = requestOptions(await post("/login/begin"));
    const cred = await navigator.credentials.get(opts);
    await post("/login/finish", {
      id: cred.id, rawId: b64u.enc(cred.rawId), type: cred.type,
      response: {
        clientDataJSON: b64u.enc(cred.response.clientDataJSON),
        authenticatorData: b64u.enc(cred.response.authenticatorData),
        signature: b64u.enc(cred.response.signature),
        userHandle: cred.response.userHandle ? b64u.enc(cred.response.userHandle) : "",
      },
    });
    location.assign(next || "/");
  } catch (e) {
    say("Not signed in: " + e.message, true);
  }
}

async function resolve(form, decision) {
  const hold = form.dataset.hold;
  const reason = form.querySelector("#reason").value;
  const buttons = form.querySelectorAll("button");
  buttons.forEach((b) => (b.disabled = true));
  try {
    say("Sign the " + decision + " with your passkey…");
    const st = await post("/holds/" + encodeURIComponent(hold) + "/statement", { decision, reason });
    const cred = await navigator.credentials.get({
      publicKey: {
        challenge: b64u.dec(st.challenge),
        rpId: st.rp_id,
        allowCredentials: (st.allow || []).map((id) => ({ type: "public-key", id: b64u.dec(id) })),
        userVerification: "required",
        timeout: 120000,
      },
    });
    const res = await post("/holds/" + encodeURIComponent(hold) + "/resolve", {
      statement: st.statement,
      reason,
      assertion: {
        id: b64u.enc(cred.rawId),
        authenticator_data: b64u.enc(cred.response.authenticatorData),
        client_data_json: b64u.enc(cred.response.clientDataJSON),
        signature: b64u.enc(cred.response.signature),
      },
    });
    say((decision === "grant" ? "Granted" : "Denied") + ": the op is " + res.state + ".");
    form.remove();
    refresh();
  } catch (e) {
    say("Not resolved: " + e.message, true);
    buttons.forEach((b) => (b.disabled = false));
  }
}

// refresh reloads the live region; a change that comes while a reload
// is in flight reloads it once more after. Reloads are the page's own
// doing, not the approver's: they do not keep the session alive.
let refreshing = false, again = false;
function refresh() {
  const live = document.getElementById("live");
  if (!live) return;
  if (refreshing) { again = true; return; }
  refreshing = true;
  fetch(live.dataset.live, {
    credentials: "same-origin",
    headers: { "X-Airlock-Background": "1", "Accept": "text/html, application/json" },
  })
    .then((r) => {
      if (r.status === 401) { signIn(); return Promise.reject(new Error("signed out")); }
      return r.ok ? r.text() : Promise.reject(new Error(r.statusText));
    })
    .then((html) => {
      // The server renders and escapes the fragment; it replaces the
      // region as HTML it made, never text from an event.
      live.innerHTML = html;
      countdowns();
    })
    .catch(() => {})
    .finally(() => {
      refreshing = false;
      if (again) { again = false; refresh(); }
    });
}

function signIn() {
  location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
}

// soon reloads shortly after the last of a burst of changes, and once
// more a little later: an event is stored before the projection the page
// reads has it.
let soonTimer = null, laterTimer = null;
function soon() {
  clearTimeout(soonTimer);
  clearTimeout(laterTimer);
  soonTimer = setTimeout(refresh, 150);
  laterTimer = setTimeout(refresh, 1200);
}

function listen() {
  const live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  const es = new EventSource("/events");
  es.addEventListener("change", (ev) => {
    let d = {};
    try { d = JSON.parse(ev.data); } catch (e) { return; }
    if (live.dataset.op && live.dataset.op !== d.op_id) return;
    soon();
  });
  es.addEventListener("ended", () => { es.close(); signIn(); });
}

function countdowns() {
  for (const el of document.querySelectorAll("time[data-countdown]")) {
    const t = Date.parse(el.getAttribute("datetime"));
    if (isNaN(t)) continue;
    const s = Math.round((t - Date.now()) / 1000);
    if (s <= 0) { el.textContent = "expired"; continue; }
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    el.textContent = (h ? h + "h" : "") + (h || m ? m + "m" : "") + r + "s";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.addEventListener("click", (ev) => {
    const el = ev.target.closest("[data-action]");
    if (!el) return;
    const a = el.dataset.action;
    if (a === "enroll") enroll();
    if (a === "login") login(el.dataset.next);
    if (a === "logout") post("/logout").then(() => location.assign("/login")).catch((e) => say(e.message, true));
  });
  const form = document.getElementById("resolve");
  if (form) {
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      // Only a press of Grant or Deny decides; Enter in the form does not.
      if (!ev.submitter || !ev.submitter.value) return;
      resolve(form, ev.submitter.value);
    });
  }
  countdowns();
  setInterval(countdowns, 1000);
  listen();
});
