// A host for tests: records what the handler logs and asks to write. Every interface of
// the world resolves to this module, so it exports the functions of all of them.
export const logged = [];
export const writes = [];

export function log(level, message) {
  logged.push([level, message]);
}
export function counterAdd() {}
export function gaugeSet() {}
export function histogramObserve() {}
export function get() {
  return undefined;
}
export function list() {
  return [];
}
export function listByIndex() {
  return [];
}
export function apply(resource, namespace, name, body) {
  writes.push({ op: 'apply', resource, namespace, name, body: JSON.parse(body) });
  return body;
}
export function mergePatch(resource, namespace, name, patch) {
  writes.push({ op: 'merge-patch', resource, namespace, name, patch: JSON.parse(patch) });
  return patch;
}
export function delete_(resource, namespace, name) {
  writes.push({ op: 'delete', resource, namespace, name });
}
export { delete_ as delete };
export function createEvent(object, eventType, reason, message) {
  writes.push({ op: 'event', object: JSON.parse(object), eventType, reason, message });
}
