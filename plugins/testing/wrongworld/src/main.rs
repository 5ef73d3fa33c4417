//! A WASI command component: valid WebAssembly, but not the switchyard handler world.

fn main() {
    println!("I am not a switchyard handler");
}
