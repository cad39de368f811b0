// JSON -> YAML, enough to show a Kubernetes object the way `kubectl get -o yaml` does: block
// mappings and sequences, strings quoted (as JSON strings, which are valid YAML) only when a
// plain scalar would read as something else. No library: this is all the page needs.

const PLAIN = /^[A-Za-z_/.][\w./@%+-]*(?: [\w./@%+-]+)*$/;
const SPECIAL = /^(?:true|false|yes|no|on|off|null|~|y|n)$/i;

function scalar(value) {
  if (value === null) return "null";
  if (typeof value !== "string") return String(value);
  return PLAIN.test(value) && !SPECIAL.test(value) ? value : JSON.stringify(value);
}

function isEmpty(value) {
  return Array.isArray(value) ? value.length === 0 : Object.keys(value).length === 0;
}

function lines(value, indent) {
  const pad = "  ".repeat(indent);
  const out = [];
  // A sequence under a key may sit at the key's indent (as kubectl writes it); under a "-" it must not.
  const block = (prefix, v, inSequence = false) => {
    if (v !== null && typeof v === "object" && !isEmpty(v)) {
      out.push(prefix);
      out.push(...lines(v, Array.isArray(v) && !inSequence ? indent : indent + 1));
    } else {
      const inline = v !== null && typeof v === "object" ? (Array.isArray(v) ? "[]" : "{}") : scalar(v);
      out.push(`${prefix} ${inline}`);
    }
  };
  if (Array.isArray(value)) {
    for (const item of value) {
      if (item !== null && typeof item === "object" && !Array.isArray(item) && !isEmpty(item)) {
        const [first, ...rest] = lines(item, indent + 1);
        out.push(`${pad}- ${first.trimStart()}`, ...rest);
      } else {
        block(`${pad}-`, item, true);
      }
    }
  } else {
    for (const [key, v] of Object.entries(value)) block(`${pad}${scalar(key)}:`, v);
  }
  return out;
}

export function toYaml(value) {
  if (value === null || typeof value !== "object") return scalar(value) + "\n";
  return lines(value, 0).join("\n") + "\n";
}
