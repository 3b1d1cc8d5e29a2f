/* postmortem report: sortable tables and a row filter. The page reads fine without this. */
(function () {
  "use strict";

  // A cell's sort key: its data-v attribute when present (raw number or ISO time), else its text.
  function sortKey(cell) {
    var raw = cell.hasAttribute("data-v") ? cell.getAttribute("data-v") : cell.textContent.trim();
    if (raw === "" || raw === "\u2014") { return null; }
    var num = Number(raw);
    return isNaN(num) ? raw.toLowerCase() : num;
  }

  function compare(a, b) {
    if (a === b) { return 0; }
    if (a === null) { return 1; }  // missing values sort last either way
    if (b === null) { return -1; }
    if (typeof a === typeof b) { return a < b ? -1 : 1; }
    return typeof a === "number" ? -1 : 1;
  }

  function makeSortable(table) {
    var body = table.tBodies[0];
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, col) {
      th.classList.add("sortable-th");
      th.tabIndex = 0;
      th.title = "sort by " + th.textContent.trim();
      function sort() {
        var ascending = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var rows = Array.prototype.map.call(body.rows, function (row, i) {
          return { row: row, key: sortKey(row.cells[col]), i: i };
        });
        rows.sort(function (x, y) {
          var c = compare(x.key, y.key);
          if (c !== 0 && x.key !== null && y.key !== null && !ascending) { c = -c; }
          return c !== 0 ? c : x.i - y.i;
        });
        var fragment = document.createDocumentFragment();
        rows.forEach(function (r) { fragment.appendChild(r.row); });
        body.appendChild(fragment);
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sort(); }
      });
    });
  }

  function makeFilter(input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    if (!table) { return; }
    input.hidden = false;
    input.addEventListener("input", function () {
      var needle = input.value.trim().toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        row.hidden = needle !== "" && row.textContent.toLowerCase().indexOf(needle) < 0;
      });
    });
  }

  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), makeSortable);
  Array.prototype.forEach.call(document.querySelectorAll("input.filter[data-table]"), makeFilter);
}());
