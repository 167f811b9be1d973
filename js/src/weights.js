export function weightsHash() {
  throw new Error("not yet");
}
