// Live progress of a running execution: server-sent events fed by WatchExecution.
// Everything from the server is data: it is written with textContent, never as HTML.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live || !window.EventSource) {
    return;
  }
  const log = document.getElementById("live-log");
  const status = document.getElementById("status");
  const source = new EventSource(live.dataset.events);
  const line = function (text) {
    const item = document.createElement("li");
    item.textContent = text;
    log.appendChild(item);
  };
  source.addEventListener("progress", function (e) {
    const p = JSON.parse(e.data);
    if (status) {
      status.textContent = p.status;
      status.className = "status s-" + p.status;
    }
    document.querySelectorAll("[data-task]").forEach(function (box) {
      const task = p.tasks.find(function (t) { return t.task_id === box.dataset.task; });
      const cell = box.querySelector(".task-status");
      if (task && cell) {
        cell.textContent = task.status;
        cell.className = "status s-" + task.status + " task-status";
      }
    });
    const what = p.agent_id ? p.event + " " + p.agent_id + " " + p.task_status : p.event + " " + p.status;
    line(what.replace(/_/g, " "));
  });
  source.addEventListener("refused", function (e) {
    const r = JSON.parse(e.data);
    line("refused: " + r.code + " " + r.reason + ": " + r.message);
    source.close();
  });
  source.addEventListener("end", function () {
    source.close();
    line("finished; loading the report");
    window.location.reload();
  });
})();
