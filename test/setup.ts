// tsyringe needs the Reflect metadata polyfill loaded before any decorated class.
import 'reflect-metadata';
